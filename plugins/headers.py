"""``headers``: control which headers reach the upstream.

Options:
- ``forward``: client request headers copied to the upstream request (an allowlist; names are
  case-insensitive). Credentials and hop-by-hop headers cannot be forwarded: the gateway's own
  provider credentials are the only ones an upstream ever sees.
- ``add``: fixed headers set on every upstream request (values may use ``${VAR}``).
- ``remove``: headers that an earlier plugin set for the upstream and that must not reach it.

A provider's own headers (content type, its credentials) always win over these.
"""

from __future__ import annotations

import msgspec

from proxy.core.canonical import Call
from proxy.core.plugin import Next
from proxy.core.reply import Reply

_NEVER_FORWARDED = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-bf-vk",  # Bifrost's virtual key header: the gateway's own client keys
        "x-goog-api-key",
        "x-amz-security-token",  # AWS session credential; the two below are SigV4's own
        "x-amz-date",
        "x-amz-content-sha256",
        "cookie",
        "host",
        "content-length",
        "content-type",
        "content-encoding",  # the body sent upstream is the gateway's, never encoded
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    }
)


class HeadersOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    forward: tuple[str, ...] = ()
    add: dict[str, str] = msgspec.field(default_factory=dict)
    remove: tuple[str, ...] = ()


class HeadersPlugin:
    """Applies :class:`HeadersOptions` to every call's upstream headers."""

    Options = HeadersOptions

    def __init__(self, options: HeadersOptions) -> None:
        names = [name.lower() for name in (*options.forward, *options.add)]
        refused = sorted(set(names) & _NEVER_FORWARDED)
        if refused:
            raise ValueError(f"these headers cannot be sent upstream by a plugin: {refused}")
        self._forward = tuple(name.lower() for name in options.forward)
        self._add = {name.lower(): value for name, value in options.add.items()}
        self._remove = frozenset(name.lower() for name in options.remove)

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Set the upstream headers, then pass the call on unchanged otherwise."""
        headers = call.upstream_headers
        if self._remove:
            for name in [n for n in headers if n.lower() in self._remove]:
                del headers[name]
        for name in self._forward:
            value = call.client_headers.get(name)
            if value is not None:
                headers[name] = value
        headers.update(self._add)
        return await next(call)
