"""The public plugin API's import paths (``proxy.chain``, ``proxy.canonical``, ``proxy.errors``)
re-export what lives in the rooms, so that a third-party plugin written against them keeps
working (docs/plugins.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import proxy.canonical
import proxy.chain
import proxy.errors
from proxy.core import canonical, errors, plugin, reply, streams
from proxy.runtime import plugins
from proxy.runtime.config import PluginSpec


@pytest.mark.parametrize("module", [proxy.chain, proxy.canonical, proxy.errors])
def test_every_name_a_public_module_lists_is_there(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names
    assert [name for name in names if not hasattr(module, name)] == []


def test_the_plugin_contract_is_the_rooms_own() -> None:
    assert proxy.chain.Plugin is plugin.Plugin
    assert proxy.chain.Next is plugin.Next
    assert proxy.chain.FinishedRequest is plugin.FinishedRequest
    assert proxy.chain.PluginContext is plugins.PluginContext
    for hook in ("Starts", "Closes", "Finishes", "Authenticates"):
        assert getattr(proxy.chain, hook) is getattr(plugin, hook)
    assert proxy.chain.authenticator is plugin.authentication  # the name before the rename
    assert proxy.chain.ReplyStream is streams.ReplyStream


def test_the_canonical_types_and_errors_are_the_rooms_own() -> None:
    for name in ("Call", "Message", "Usage", "Principal", "Deployment"):
        assert getattr(proxy.canonical, name) is getattr(canonical, name)
    for name in ("Reply", "Response", "Chunk", "RawFrames"):
        assert getattr(proxy.canonical, name) is getattr(reply, name)
    for name in ("GatewayError", "BadRequest", "UpstreamError", "RateLimited"):
        assert getattr(proxy.errors, name) is getattr(errors, name)


async def test_a_plugin_written_against_the_old_paths_loads_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "old_style_plugin.py").write_text(
        textwrap.dedent(
            """
            from proxy.canonical import Call, Reply
            from proxy.chain import Next
            from proxy.errors import BadRequest


            class Refuses:
                async def __call__(self, call: Call, next: Next) -> Reply:
                    if call.model == "forbidden":
                        raise BadRequest("no")
                    return await next(call)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = PluginSpec(ref="old_style_plugin:Refuses", options={}, path="plugins[0]")
    (loaded,) = proxy.chain.load_plugins([spec], proxy.chain.BUILTINS)

    async def upstream(call: canonical.Call) -> reply.Reply:
        return reply.Reply(provider="p", model=call.model, attempts=1)

    chain = proxy.chain.compose([loaded], upstream)
    allowed = await chain(canonical.Call(request_id="r", dialect="d", model="m", messages=[]))
    assert allowed.model == "m"
    with pytest.raises(errors.BadRequest):
        await chain(canonical.Call(request_id="r", dialect="d", model="forbidden", messages=[]))
