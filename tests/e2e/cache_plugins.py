"""Test-only plugins for the cache's end-to-end tests, loaded by ``module:Class`` from a config.

- :class:`HeaderPrincipal` stands in for the ``auth`` plugin: it takes the caller's key id and
  team from the ``x-test-key`` and ``x-test-team`` request headers, so a test can speak as
  several tenants.
- :class:`ClockedCache` is the built-in ``cache`` on a :class:`~tests.faults.FakeClock` that a
  test advances (reached through the running app's snapshot).
"""

from __future__ import annotations

from plugins.cache import CacheConfig, CachePlugin
from proxy.core.canonical import Call, Principal
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.runtime.plugins import PluginContext
from tests.faults import FakeClock


class HeaderPrincipal:
    """Sets ``call.principal`` from ``x-test-key`` / ``x-test-team`` (absent: anonymous)."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        headers = call.client_headers
        key, team = headers.get("x-test-key"), headers.get("x-test-team")
        if key is not None or team is not None:
            call.principal = Principal(key_id=key, team=team)
        return await next(call)


class ClockedCache(CachePlugin):
    """``cache`` whose entries age on ``clock``."""

    def __init__(self, options: CacheConfig, context: PluginContext) -> None:
        self.clock = FakeClock()
        super().__init__(options, context, clock=self.clock)
