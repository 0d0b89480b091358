"""A plugin for end-to-end tests that answers whole: it asks the rest of the chain for a whole
reply even when the client asked for a stream, as a plugin holding a whole answer does (the
gateway must then frame it for a streaming client itself)."""

from __future__ import annotations

from proxy.core.canonical import Call
from proxy.core.plugin import Next
from proxy.core.reply import Reply


class AnswerWhole:
    """See the module docstring."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        call.stream = False
        return await next(call)
