"""A stand-in for the ``auth`` plugin in end-to-end tests: the caller's key id is whatever the
``x-test-key`` header says (no header: anonymous). It sets ``call.principal`` in the chain and
offers ``authenticate`` for the routes outside it, as :mod:`proxy.core.plugin` describes."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.core.canonical import ANONYMOUS, Call, Principal
from proxy.core.plugin import Next
from proxy.core.reply import Reply


class HeaderKey:
    """See the module docstring."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        call.principal = await self.authenticate(call.client_headers)
        return await next(call)

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        key = headers.get("x-test-key")
        return Principal(key_id=key) if key else ANONYMOUS
