"""proxy/upstream/router.py: from the model a client names to the deployments that can serve it."""

from __future__ import annotations

import pytest

from proxy.core.canonical import Deployment
from proxy.core.errors import BadRequest, ModelNotFound, NoReadyDeployment
from proxy.upstream.router import MAX_REMEMBERED_DIRECT, DeploymentConfig, Router

READY = {"mock": True, "openai": True, "keyless": False, "other": True}


def router(**aliases: list[str | tuple[str, float]]) -> Router:
    configs = {}
    for alias, targets in aliases.items():
        configs[alias] = tuple(
            DeploymentConfig(target=t) if isinstance(t, str) else DeploymentConfig(*t)
            for t in targets
        )
    return Router(configs, READY)


def test_alias_resolves_to_its_ready_deployments_only():
    r = router(fast=[("openai/gpt-4o-mini", 3.0), "keyless/gpt-x", "mock/fast"])
    assert r.resolve("fast") == [
        Deployment(provider="openai", model="gpt-4o-mini", weight=3.0),
        Deployment(provider="mock", model="fast", weight=1.0),
    ]


def test_resolve_returns_a_fresh_list():
    r = router(fast=["openai/a", "mock/b"])
    first = r.resolve("fast")
    first.reverse()
    first.append(Deployment(provider="x", model="y"))
    assert r.resolve("fast") == [
        Deployment(provider="openai", model="a"),
        Deployment(provider="mock", model="b"),
    ]


def test_alias_with_no_ready_deployment():
    r = router(offline=["keyless/gpt-x"])
    with pytest.raises(NoReadyDeployment) as info:
        r.resolve("offline")
    assert info.value.status == 503
    assert "offline" in info.value.message


def test_alias_whose_provider_is_unknown_to_readiness_is_not_ready():
    r = router(ghost=["nowhere/m"])
    with pytest.raises(NoReadyDeployment):
        r.resolve("ghost")


def test_provider_slash_model_directly():
    assert router().resolve("openai/gpt-4o") == [Deployment(provider="openai", model="gpt-4o")]


def test_provider_slash_model_resolves_the_same_again_into_a_fresh_list():
    r = router()
    first = r.resolve("openai/gpt-4o")
    first.clear()
    again = r.resolve("openai/gpt-4o")
    assert again == [Deployment(provider="openai", model="gpt-4o")]
    assert again[0] is r.resolve("openai/gpt-4o")[0]  # remembered, not built again


def test_provider_slash_model_names_past_the_memo_bound_still_resolve():
    r = router()
    names = [f"openai/m{n}" for n in range(MAX_REMEMBERED_DIRECT + 2)]
    for name in names:
        r.resolve(name)
    last = names[-1]
    assert r.resolve(last) == [Deployment(provider="openai", model=last[7:])]
    assert r.resolve(last)[0] is not r.resolve(last)[0]  # not remembered: built each time


def test_upstream_model_names_may_contain_slashes():
    assert router().resolve("openai/meta-llama/llama-3-70b") == [
        Deployment(provider="openai", model="meta-llama/llama-3-70b")
    ]


def test_alias_wins_over_provider_slash_model():
    r = router(**{"openai/gpt-4o": ["mock/pretend"]})
    assert r.resolve("openai/gpt-4o") == [Deployment(provider="mock", model="pretend")]


@pytest.mark.parametrize("model", ["gpt-4o", "unknown/gpt-4o", "openai/", "/gpt-4o", "mock"])
def test_unknown_model(model: str):
    with pytest.raises(ModelNotFound) as info:
        router().resolve(model)
    assert info.value.param == "model"
    assert info.value.status == 404
    assert info.value.code == "model_not_found"


def test_not_ready_provider_directly():
    with pytest.raises(NoReadyDeployment) as info:
        router().resolve("keyless/gpt-x")
    assert info.value.param == "model"
    assert "keyless" in info.value.message


def test_aliases_lists_every_deployment_ready_or_not():
    r = router(fast=["openai/a", "keyless/b"])
    assert r.aliases() == {
        "fast": (
            Deployment(provider="openai", model="a"),
            Deployment(provider="keyless", model="b"),
        )
    }


def test_is_ready():
    r = router()
    assert r.is_ready("openai") is True
    assert r.is_ready("keyless") is False
    assert r.is_ready("never-configured") is False


# ---------------------------------------------------------------------------------------------
# Default model and provider pin
# ---------------------------------------------------------------------------------------------


def test_the_default_is_the_first_ready_providers_default_model():
    r = Router({}, READY, {"keyless": "k-default", "openai": "o-default", "mock": "m-default"})
    assert r.default_model() == "openai/o-default"
    assert r.resolve(r.default_model()) == [Deployment(provider="openai", model="o-default")]
    assert r.default_model("mock") == "mock/m-default"


def test_no_default_and_no_name():
    with pytest.raises(BadRequest) as info:
        Router({}, READY).default_model()
    assert info.value.param == "model"
    with pytest.raises(BadRequest):
        Router({}, READY, {"keyless": "k"}).default_model()
    with pytest.raises(BadRequest) as info:
        Router({}, READY, {"openai": "o"}).resolve("")
    assert info.value.param == "model"


def test_without_default_models_the_first_alias_with_a_ready_deployment_serves():
    r = router(down=["keyless/x"], fast=["openai/a", "mock/b"], slow=["mock/c"])
    assert r.default_model() == "fast"
    assert r.default_model("mock") == "fast"
    assert r.resolve("fast", "mock") == [Deployment("mock", "b")]
    with pytest.raises(BadRequest) as info:
        r.default_model("keyless")
    assert info.value.param == "model"


def test_a_providers_default_model_wins_over_aliases():
    configs = {"fast": (DeploymentConfig(target="mock/b"),)}
    r = Router(configs, READY, {"openai": "o-default"})
    assert r.default_model() == "openai/o-default"
    assert r.default_model("mock") == "fast"


def test_provider_pin_keeps_only_that_providers_deployments():
    r = router(fast=["openai/a", "mock/b", "other/c"])
    assert r.resolve("fast", "mock") == [Deployment(provider="mock", model="b")]
    assert r.resolve("openai/gpt", "openai") == [Deployment(provider="openai", model="gpt")]


def test_provider_pin_to_an_unknown_provider():
    with pytest.raises(BadRequest) as info:
        router(fast=["openai/a"]).resolve("fast", "nope")
    assert info.value.param == "provider"


def test_provider_pin_that_excludes_every_deployment():
    with pytest.raises(BadRequest) as info:
        router(fast=["openai/a"]).resolve("fast", "mock")
    assert info.value.param == "provider"


def test_a_huge_or_unprintable_model_name_is_a_400_not_an_echo():
    from proxy.upstream.router import MAX_MODEL_NAME

    router = Router({}, {"p": True})
    for model in ("p/" + "x" * MAX_MODEL_NAME, "p/a\r\nb"):
        with pytest.raises(BadRequest) as caught:
            router.resolve(model)
        assert caught.value.param == "model"
        assert model not in caught.value.message
