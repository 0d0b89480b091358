"""plugins/auth.py: the caller is authenticated and every model it names is checked."""

from __future__ import annotations

import pytest
import structlog

from plugins.auth import AuthPlugin
from proxy.core.canonical import Call, GatewayOptions, Message, Principal, WeightedTarget
from proxy.core.errors import AuthenticationFailed, PermissionDenied
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.config import AuthConfig, DeclaredKey
from proxy.runtime.plugins import PluginContext
from tests.plugins.scripted import ScriptedUpstream, router, sample

KEY = "sk-cw-" + "k" * 40
MODELS: dict = {"fast": ["p/fast-model"], "slow": ["p/slow-model"]}


class Harness:
    def __init__(self) -> None:
        self.metrics = Metrics()
        self.resolver = router(MODELS)
        auth = AuthConfig(keys=(DeclaredKey(key=KEY, alias="ci", models=("fast", "q/*")),))
        authenticator = Authenticator(auth, None, self.metrics)
        context = PluginContext(
            self.resolver.resolve,
            self.metrics,
            structlog.get_logger(),
            authenticator=authenticator,
        )
        self.plugin = AuthPlugin(context=context)
        self.upstream = ScriptedUpstream()
        self.chain = compose([self.plugin], self.upstream)

    def call(self, model: str = "fast", headers: dict | None = None, **fields) -> Call:
        return Call(
            request_id="r",
            dialect="openai",
            model=model,
            messages=[Message("user", "hi")],
            client_headers=headers if headers is not None else {"authorization": f"Bearer {KEY}"},
            deployments=self.resolver.resolve(model),
            **fields,
        )


async def test_an_anonymous_call_is_authenticated_from_its_headers():
    h = Harness()
    await h.chain(h.call())
    assert h.upstream.calls[0].principal.key_id == "config:ci"
    with pytest.raises(AuthenticationFailed):
        await h.chain(h.call(headers={}))
    assert len(h.upstream.calls) == 1


async def test_a_principal_set_by_the_app_is_kept():
    h = Harness()
    principal = Principal(key_id="from-the-gate")
    await h.chain(h.call(headers={}, principal=principal))
    assert h.upstream.calls[0].principal is principal


@pytest.mark.parametrize(
    ("model", "options", "param"),
    [
        ("slow", GatewayOptions(), "model"),
        ("fast", GatewayOptions(fallbacks=["q/any", "slow"]), "fallbacks[1]"),
        (
            "fast",
            GatewayOptions(load_balancer=[WeightedTarget("fast"), WeightedTarget("p/x")]),
            "load_balancer.models[1]",
        ),
    ],
)
async def test_every_model_a_request_names_must_be_allowed(model, options, param):
    h = Harness()
    with pytest.raises(PermissionDenied) as denied:
        await h.chain(h.call(model, options=options))
    assert (denied.value.status, denied.value.code) == (403, "model_not_allowed")
    assert denied.value.param == param
    assert h.upstream.calls == []
    assert sample(h.metrics, "crossway_auth_failures_total", reason="model_not_allowed") == 1
