"""plugins/fallback.py: which failures move on, to which model, and what the reply says."""

from __future__ import annotations

import pytest

from plugins.fallback import FallbackConfig, FallbackPlugin
from proxy.core.canonical import Call, GatewayOptions, Message, Principal, WeightedTarget
from proxy.core.errors import (
    BadRequest,
    ContentPolicyViolation,
    ContextWindowExceeded,
    DeadlineExceeded,
    GatewayError,
    NoReadyDeployment,
    UpstreamUnavailable,
)
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.governance.price_catalog import parse_price
from proxy.governance.pricing import Catalog, PriceBook
from proxy.runtime.config import PluginSpec
from proxy.runtime.plugins import PluginLoadError, load_plugins
from tests.plugins.scripted import ScriptedUpstream, context, fail, router, sample

MODELS: dict = {
    "primary": ["p/primary-model"],
    "backup": ["q/backup-model"],
    "second": ["q/second-model"],
    "large": ["q/large-model"],
    "lenient": ["q/lenient-model"],
    "offline": ["down/model"],
}


def make_call(model: str = "primary", **fields) -> Call:
    resolver = router(MODELS, not_ready=("down",), providers=("p", "q"))
    fields.setdefault("deployments", resolver.resolve(model))
    return Call(
        request_id="r", dialect="openai", model=model, messages=[Message("user", "hi")], **fields
    )


class Harness:
    def __init__(self, prices: PriceBook | None = None, **options) -> None:
        self.metrics = Metrics()
        self.upstream = ScriptedUpstream()
        resolver = router(MODELS, not_ready=("down",), providers=("p", "q"))
        self.plugin = FallbackPlugin(
            FallbackConfig(**options), context(resolver, metrics=self.metrics, prices=prices)
        )
        self.chain = compose([self.plugin], self.upstream)

    async def error(self, call: Call) -> GatewayError:
        with pytest.raises(GatewayError) as caught:
            await self.chain(call)
        return caught.value


async def test_primary_down_the_chain_answers_and_says_which_model_served():
    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    call = make_call()
    reply = await h.chain(call)
    assert call.accounting.fallback == "backup"  # for the spend ledger
    assert (reply.provider, reply.model) == ("q", "backup-model")
    assert reply.headers["x-crossway-fallback"] == "backup"
    assert reply.headers["x-crossway-attempts"] == "2"
    assert reply.attempts == 2
    fallback_call = h.upstream.calls[1]
    assert fallback_call.model == "backup"
    assert [d.target for d in fallback_call.deployments] == ["q/backup-model"]
    labels = {"from_model": "primary", "to_model": "backup"}
    assert sample(h.metrics, "crossway_fallbacks_total", **labels) == 1


async def test_a_primary_success_has_no_fallback_header():
    h = Harness(chains={"primary": ("backup",)})
    call = make_call()
    reply = await h.chain(call)
    assert "x-crossway-fallback" not in reply.headers
    assert call.accounting.fallback is None
    assert reply.headers["x-crossway-attempts"] == "1"


async def test_the_chain_is_followed_in_order_and_attempts_add_up():
    h = Harness(chains={"primary": ("backup", "second")})
    h.upstream.script("p/primary-model", then=fail(429, provider="p"))
    h.upstream.script("q/backup-model", then=lambda: UpstreamUnavailable("down", provider="q"))
    failed = fail(500, provider="q")()
    failed.attempts = 3  # as a retry plugin inside would report

    h.upstream.script("q/second-model", lambda: failed)
    error = await h.error(make_call())
    assert error is failed
    assert error.attempts == 5
    assert h.upstream.targets() == ["p/primary-model", "q/backup-model", "q/second-model"]


async def test_request_fallbacks_replace_the_configured_chain_up_to_the_limit():
    h = Harness(chains={"primary": ("backup",)}, max_request_fallbacks=2)
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    h.upstream.script("q/second-model", then=fail(503, provider="q"))
    h.upstream.script("q/large-model", then=fail(503, provider="q"))
    options = GatewayOptions(fallbacks=["second", "large", "lenient"])
    await h.error(make_call(options=options))
    assert h.upstream.targets() == ["p/primary-model", "q/second-model", "q/large-model"]


async def test_request_fallbacks_can_be_refused_by_the_operator():
    h = Harness(chains={"primary": ("backup",)}, request_fallbacks=False)
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    reply = await h.chain(make_call(options=GatewayOptions(fallbacks=["second"])))
    assert reply.headers["x-crossway-fallback"] == "backup"


async def test_direct_provider_model_targets_work_as_fallbacks():
    h = Harness()
    h.upstream.script("p/primary-model", then=fail(502, provider="p"))
    reply = await h.chain(make_call(options=GatewayOptions(fallbacks=["q/anything"])))
    assert (reply.provider, reply.model) == ("q", "anything")
    assert reply.headers["x-crossway-fallback"] == "q/anything"


async def test_unresolvable_fallbacks_are_skipped_and_the_last_real_error_raised():
    h = Harness()
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    options = GatewayOptions(fallbacks=["nope", "offline", "zz/x"])
    error = await h.error(make_call(options=options))
    assert error.status == 503
    assert error.provider == "p"
    assert len(h.upstream.calls) == 1


async def test_a_model_is_never_tried_twice():
    h = Harness(chains={"primary": ("primary", "backup", "primary")})
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    h.upstream.script("q/backup-model", then=fail(503, provider="q"))
    await h.error(make_call())
    assert h.upstream.targets() == ["p/primary-model", "q/backup-model"]


@pytest.mark.parametrize(
    "failure",
    [
        fail(429, provider="p"),
        fail(500, provider="p"),
        fail(503, provider="p"),
        fail(401, provider="p"),
        lambda: UpstreamUnavailable("reset", provider="p"),
        lambda: NoReadyDeployment("cooling down"),
    ],
)
async def test_default_kinds_fall_back(failure):
    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", failure)
    assert (await h.chain(make_call())).provider == "q"


@pytest.mark.parametrize(
    "failure",
    [
        fail(400, provider="p"),
        fail(404, provider="p"),
        lambda: BadRequest("bad"),
        lambda: DeadlineExceeded("late"),
    ],
)
async def test_final_errors_do_not_fall_back(failure):
    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", failure)
    await h.error(make_call())
    assert len(h.upstream.calls) == 1


async def test_on_kinds_is_configurable():
    h = Harness(chains={"primary": ("backup",)}, on_kinds=("overloaded",))
    h.upstream.script("p/primary-model", fail(429, provider="p"), fail(503, provider="p"))
    await h.error(make_call())
    assert (await h.chain(make_call())).provider == "q"


async def test_context_window_overflow_goes_to_the_larger_model_only():
    h = Harness(chains={"primary": ("backup",)}, on_context_window={"primary": "large"})
    overflow = ContextWindowExceeded("too long", upstream_status=400, provider="p")
    h.upstream.script("p/primary-model", lambda: overflow)
    reply = await h.chain(make_call())
    assert reply.headers["x-crossway-fallback"] == "large"

    h.upstream.script("p/primary-model", lambda: overflow)
    h.upstream.script("q/large-model", lambda: overflow)
    assert await h.error(make_call()) is overflow
    assert "q/backup-model" not in h.upstream.targets()


async def test_content_policy_goes_to_its_model_and_is_final_without_one():
    h = Harness(on_content_policy={"primary": "lenient"})
    refusal = ContentPolicyViolation("refused", upstream_status=400, provider="p")
    h.upstream.script("p/primary-model", lambda: refusal)
    assert (await h.chain(make_call())).headers["x-crossway-fallback"] == "lenient"

    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", lambda: refusal)
    assert await h.error(make_call()) is refusal


async def test_a_fallback_drops_the_primary_choices_but_keeps_the_rest():
    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", fail(503, provider="p"))
    primary = make_call(
        options=GatewayOptions(
            provider="p", load_balancer=[WeightedTarget("primary")], timeout=9.0
        ),
    )
    primary.deployment = primary.deployments[0]
    await h.chain(primary)
    second = h.upstream.calls[1]
    assert second.deployment is None
    assert second.options.provider is None
    assert second.options.load_balancer is None
    assert second.options.timeout == 9.0
    assert second.timings is primary.timings
    assert primary.model == "primary"
    assert primary.options.provider == "p"


async def test_a_failure_mid_stream_is_not_a_fallback():
    h = Harness(chains={"primary": ("backup",)})
    h.upstream.script("p/primary-model", ("cut", 1))
    reply = await h.chain(make_call(stream=True))
    assert reply.stream is not None
    assert (await anext(reply.stream)).choices[0].delta.content == "one"
    with pytest.raises(UpstreamUnavailable):
        await anext(reply.stream)
    assert h.upstream.targets() == ["p/primary-model"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chains": {"primary": ["nope"]}}, "'nope' is not a configured model"),
        ({"on_context_window": {"primary": "zz/x"}}, "'zz/x' is not a configured model"),
        ({"on_kinds": ["oops"]}, "Invalid enum value 'oops'"),
        ({"chain": {}}, "unknown field"),
        ({"chains": {"primary": [""]}}, "fallback model '': no model given"),
        ({"on_content_policy": {"primary": "p/a\tb"}}, "must be printable"),
    ],
)
def test_bad_options_are_load_errors(options: dict, message: str):
    resolver = router(MODELS, not_ready=("down",), providers=("p", "q"))
    spec = PluginSpec(ref="fallback", options=options, path="$.plugins[0].fallback")
    with pytest.raises(PluginLoadError, match=message):
        load_plugins([spec], {"fallback": "plugins.fallback:FallbackPlugin"}, context(resolver))


def test_a_model_without_a_ready_provider_is_a_valid_fallback():
    resolver = router(MODELS, not_ready=("down",), providers=("p", "q"))
    FallbackPlugin(FallbackConfig(chains={"primary": ("offline",)}), context(resolver))


def priced(prices: dict[str, dict]) -> PriceBook:
    return PriceBook(
        Catalog({}), deployments={t: parse_price(spec, "$") for t, spec in prices.items()}
    )


PRICES = {
    "q/backup-model": {"input": 10, "output": 10},
    "q/second-model": {"input": 1, "output": 1},
    "q/large-model": {"input": 5, "output": 5},
}


async def test_order_cost_tries_the_cheapest_fallback_first():
    h = Harness(
        priced(PRICES), order="cost", chains={"primary": ("backup", "lenient", "second", "large")}
    )
    for target in ("p/primary-model", "q/second-model", "q/large-model", "q/backup-model"):
        h.upstream.script(target, then=fail(503, provider=target[0]))
    reply = await h.chain(make_call())
    assert reply.headers["x-crossway-fallback"] == "lenient"
    # The primary first (the client asked for it), then by price; lenient has no price: last.
    assert h.upstream.targets() == [
        "p/primary-model",
        "q/second-model",
        "q/large-model",
        "q/backup-model",
        "q/lenient-model",
    ]


async def test_order_cost_keeps_the_written_order_between_equal_prices():
    same = {"input": 1, "output": 1}
    prices = priced({"q/backup-model": same, "q/second-model": same})
    h = Harness(prices, order="cost", chains={"primary": ("second", "backup")})
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    h.upstream.script("q/second-model", then=fail(503, provider="q"))
    reply = await h.chain(make_call())
    assert reply.headers["x-crossway-fallback"] == "backup"
    assert h.upstream.targets() == ["p/primary-model", "q/second-model", "q/backup-model"]


async def test_order_config_is_the_default_and_ignores_prices():
    h = Harness(priced(PRICES), chains={"primary": ("backup", "second")})
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    reply = await h.chain(make_call())
    assert reply.headers["x-crossway-fallback"] == "backup"


async def test_a_configured_chain_skips_models_the_key_may_not_use():
    h = Harness(chains={"primary": ("backup", "second")})
    h.upstream.script("p/primary-model", then=fail(503, provider="p"))
    principal = Principal(key_id="k", models=frozenset({"primary", "second"}))
    reply = await h.chain(make_call(principal=principal))
    assert reply.headers["x-crossway-fallback"] == "second"
    assert "q/backup-model" not in h.upstream.targets()
