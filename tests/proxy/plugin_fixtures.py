"""Plugin classes that tests load by ``module:Class`` (``tests.proxy.plugin_fixtures:Name``)."""

from __future__ import annotations

import msgspec

from proxy.core.canonical import Call
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.runtime.plugins import PluginContext

MODULE = __name__


class TaggingOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Options of :class:`TaggingPlugin`."""

    tag: str
    times: int = 1


class TaggingPlugin:
    """Appends its tag ``times`` times to the ``x-tags`` upstream header, then calls ``next``."""

    Options = TaggingOptions

    def __init__(self, options: TaggingOptions) -> None:
        if options.times < 0:
            raise ValueError("times must not be negative")
        self.options = options

    async def __call__(self, call: Call, next: Next) -> Reply:
        tags = [t for t in call.upstream_headers.get("x-tags", "").split(",") if t]
        call.upstream_headers["x-tags"] = ",".join(tags + [self.options.tag] * self.options.times)
        return await next(call)


class PlainPlugin:
    """A plugin without options."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        return await next(call)


class NotAPlugin:
    """A class without ``__call__``."""


class SyncCallable:
    """A class whose ``__call__`` is not a coroutine function: not a plugin."""

    def __call__(self, call: Call, next: Next) -> Reply:
        raise AssertionError("never called")


NOT_A_CLASS = 42


class ContextPlugin:
    """A plugin whose constructor asks for the runtime's :class:`PluginContext`."""

    def __init__(self, *, context: PluginContext) -> None:
        self.context = context

    async def __call__(self, call: Call, next: Next) -> Reply:
        return await next(call)
