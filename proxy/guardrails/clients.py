"""The HTTP clients the checks of one config share: one aiohttp session for every webhook, and
one upstream transport (:class:`proxy.upstream.transport.HttpTransport`) for the providers the
moderation checks call. Each is made on first use (inside the event loop) and closed with
:meth:`Clients.close` when the config's plugin closes."""

from __future__ import annotations

import aiohttp

from proxy.providers.base import HttpProvider
from proxy.upstream.transport import USER_AGENT, HttpTransport


class Clients:
    """Lazily made HTTP clients (see the module docstring)."""

    __slots__ = ("_moderated", "_session", "_transport")

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._transport: HttpTransport | None = None
        self._moderated: dict[str, HttpProvider] = {}

    def moderate_with(self, provider: HttpProvider) -> None:
        """Note that a moderation check calls ``provider`` (before the first request)."""
        self._moderated[provider.name] = provider

    def session(self) -> aiohttp.ClientSession:
        """The webhooks' session (no cookies, no proxies from the environment)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"user-agent": USER_AGENT},
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session

    def transport(self) -> HttpTransport:
        """The moderation providers' transport."""
        if self._transport is None:
            self._transport = HttpTransport(self._moderated)
        return self._transport

    async def close(self) -> None:
        """Close what was made; a later use makes them again."""
        session, self._session = self._session, None
        transport, self._transport = self._transport, None
        if session is not None:
            await session.close()
        if transport is not None:
            await transport.close()
