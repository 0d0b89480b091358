"""What one request allows the cache to do: read, write, how old an entry may be, how long to keep.

A client steers the cache with standard ``Cache-Control`` request directives and, where a header
is not convenient, gateway-specific controls:

- ``Cache-Control: no-cache`` — do not answer from the cache, but store the fresh answer (it
  refreshes the entry);
- ``Cache-Control: no-store`` — neither read nor write (so does ``Call.options.no_cache``);
- ``Cache-Control: max-age=N`` — accept only entries at most N seconds old;
- ``x-crossway-cache-ttl: N`` — keep this answer N seconds (any dialect); orq's ``cache: {ttl,
  type: exact_match}`` body control does the same (``Call.options.cache``), the header winning
  when both are given. A TTL above the operator's ``max_ttl`` is lowered to it.

In ``opt_in`` mode only a request that asks (orq's ``cache`` control or the TTL header) uses the
cache at all. ``Cache-Control`` directives that cannot be parsed are ignored, as HTTP caches do;
a TTL header that is not a positive integer is the client's error (400).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from proxy.core.canonical import GatewayOptions
from proxy.core.errors import BadRequest

Mode = Literal["always", "opt_in"]
TTL_HEADER = "x-crossway-cache-ttl"
_MAX_DIGITS = 10


class Directives(msgspec.Struct, frozen=True):
    """What the cache may do for one request.

    ``read``: look for an entry; ``write``: store the answer; ``max_age``: the oldest entry
    (seconds) the client accepts, None for any live one; ``ttl``: seconds to keep the answer.
    """

    read: bool
    write: bool
    max_age: float | None
    ttl: int

    @property
    def bypass(self) -> bool:
        """The cache plays no part in this request."""
        return not (self.read or self.write)


def directives(
    headers: Mapping[str, str],
    options: GatewayOptions,
    *,
    mode: Mode,
    ttl: int,
    max_ttl: int,
    plain: Directives | None = None,
) -> Directives:
    """The directives of a request with these headers and gateway options.

    ``ttl`` is the configured lifetime, ``max_ttl`` the most a client may ask for; ``plain``,
    when given, is :func:`plain_directives` of them, returned (not made again) for a request
    that asks for nothing. Raises :class:`BadRequest` (``param="x-crossway-cache-ttl"``) for a
    TTL header that is not a positive integer.
    """
    asked_ttl = _ttl_header(headers.get(TTL_HEADER))
    if asked_ttl is None and options.cache is not None:
        asked_ttl = options.cache.ttl
    if options.no_cache or (mode == "opt_in" and asked_ttl is None):
        return Directives(read=False, write=False, max_age=None, ttl=ttl)
    control = headers.get("cache-control")
    if not control and asked_ttl is None:
        return plain_directives(ttl, max_ttl) if plain is None else plain
    read = write = True
    max_age: float | None = None
    if control:
        for directive in control.lower().split(","):
            name, _, value = directive.strip().partition("=")
            if name == "no-store":
                read = write = False
            elif name == "no-cache":
                read = False
            elif name == "max-age":
                seconds = _seconds(value)
                if seconds is not None:
                    max_age = seconds if max_age is None else min(max_age, seconds)
    lifetime = min(asked_ttl if asked_ttl is not None else ttl, max_ttl)
    return Directives(read=read, write=write, max_age=max_age, ttl=lifetime)


def plain_directives(ttl: int, max_ttl: int) -> Directives:
    """What a request that asks for nothing may do: read, write, keep the answer ``ttl``
    seconds (at most ``max_ttl``)."""
    return Directives(read=True, write=True, max_age=None, ttl=min(ttl, max_ttl))


def _ttl_header(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if _is_count(text) and int(text) > 0:
        return int(text)
    raise BadRequest(
        f"{TTL_HEADER} must be a positive whole number of seconds, not {value[:32]!r}",
        param=TTL_HEADER,
    )


def _seconds(value: str) -> int | None:
    text = value.strip().strip('"')
    return int(text) if _is_count(text) else None


def _is_count(text: str) -> bool:
    """Decimal digits only, few enough to be a sane number of seconds."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()
