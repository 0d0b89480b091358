"""The ``state:`` section of the config file: where shared state lives and what each use does
when that place cannot answer.

```yaml
state:
  backend: redis                       # memory (default) | redis
  redis:
    url: "${REDIS_URL:-redis://127.0.0.1:6379/0}"   # redis://, rediss:// (TLS), unix://
    # url: [redis://10.0.0.1:6379, redis://10.0.0.2:6379]   # a Redis Cluster's seed nodes
    cluster: false                     # Redis Cluster (the URL names one node; database 0)
    timeout_ms: 50                     # per operation; past it the use's failure policy applies
    breaker: {failures: 3, cooldown_ms: 1000}
    max_idle: 2592000                  # seconds a key written without a TTL outlives its last write
  on_unavailable: {limits: local, budgets: closed, cache: open, health: local}
```

``url`` is one URL or, for a Redis Cluster, a list of them (its seed nodes, as redis-py's
``startup_nodes`` or node-redis's ``rootNodes``): the slot map is read from the first that
answers, so a gateway starts while some seeds are down. Every seed of a list uses the same
scheme and credentials, which apply to every node the map names.

The section applies as the process started (a reload keeps the connection and the counters in
it). The policies (:mod:`proxy.state.policy` says what each does):

- ``limits``: ``local`` (count in this process meanwhile), ``open`` (admit uncounted) or
  ``closed`` (refuse, 503 ``state_unavailable``);
- ``budgets``: ``closed`` (refuse, 503 ``state_unavailable``), ``open`` or ``local``;
- ``cache``: ``open`` only — a miss (the cache never fails a request);
- ``health``: ``local`` (eject and count in this process meanwhile) or ``open`` (every
  deployment healthy).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import msgspec
from msgspec import Meta, Struct

Backend = Literal["memory", "redis"]
Use = Literal["limits", "budgets", "cache", "health"]
USES: tuple[Use, ...] = ("limits", "budgets", "cache", "health")
_REDIS_URL = r"^(redis|rediss|unix)://.+$"
RedisUrl = Annotated[str, Meta(pattern=_REDIS_URL)]


class RedisAddress:
    """Where a Redis server is, parsed from a ``redis://``, ``rediss://`` or ``unix://`` URL:
    ``redis://[[user]:password@]host[:port][/db]``, ``unix:///path?db=N&password=…``.

    Raises :class:`ValueError` (never quoting the password) for anything else."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.tls = parts.scheme == "rediss"
        self.path: str | None = None
        self.host = "127.0.0.1"
        self.port = 6379
        if parts.scheme == "unix":
            self.path = unquote(parts.path)
            if not self.path:
                raise ValueError("a unix:// Redis URL needs a socket path")
            database = query.get("db", ["0"])[0]
        elif parts.scheme in ("redis", "rediss"):
            try:
                self.host = parts.hostname or "127.0.0.1"
                self.port = parts.port or 6379
            except ValueError:
                raise ValueError("the Redis URL has an invalid port") from None
            database = parts.path.lstrip("/") or query.get("db", ["0"])[0]
        else:
            raise ValueError("a Redis URL starts with redis://, rediss:// or unix://")
        if not database.isdigit():
            raise ValueError("the Redis database must be a number")
        self.database = int(database)
        self.username = unquote(parts.username) if parts.username else None
        password = parts.password or query.get("password", [None])[0]
        self.password = unquote(password) if password else None

    @property
    def node(self) -> str:
        """The server as ``host:port`` (a unix socket: its path): a metric's label."""
        return self.path if self.path is not None else f"{self.host}:{self.port}"

    @property
    def description(self) -> str:
        """The address without credentials, for logs."""
        if self.path is not None:
            return f"unix://{self.path}?db={self.database}"
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{self.host}:{self.port}/{self.database}"

    def handshake(self) -> list[tuple[Any, ...]]:
        """The commands a new connection sends first (``AUTH``, ``SELECT``)."""
        commands: list[tuple[Any, ...]] = []
        if self.password is not None:
            if self.username:
                commands.append(("AUTH", self.username, self.password))
            else:
                commands.append(("AUTH", self.password))
        if self.database:
            commands.append(("SELECT", self.database))
        return commands


class BreakerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """After ``failures`` consecutive failed operations the store stops calling Redis; a probe
    every ``cooldown_ms`` closes the breaker again once Redis answers."""

    failures: Annotated[int, Meta(ge=1)] = 3
    cooldown_ms: Annotated[int, Meta(ge=10, le=60_000)] = 1000


class RedisConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """How to reach Redis; see the module docstring. A URL may carry a password
    (``redis://:secret@host``): it is never logged."""

    url: RedisUrl | Annotated[list[RedisUrl], Meta(min_length=1)] = "redis://127.0.0.1:6379/0"
    cluster: bool = False
    timeout_ms: Annotated[int, Meta(ge=1, le=60_000)] = 50
    breaker: BreakerConfig = BreakerConfig()
    max_idle: Annotated[int, Meta(ge=60)] = 2_592_000

    def __post_init__(self) -> None:
        # A ValueError is a validation error at $.state.redis.
        addresses = [RedisAddress(url) for url in self.urls]
        if len(addresses) > 1 and not self.cluster:
            raise ValueError(
                "several Redis URLs name the seeds of a Redis Cluster: set cluster: true"
            )
        if self.cluster and any(a.path is not None or a.database for a in addresses):
            raise ValueError(
                "a Redis Cluster is reached over redis:// or rediss:// and has database 0 only"
            )
        first = addresses[0]
        if any(
            (a.tls, a.username, a.password) != (first.tls, first.username, first.password)
            for a in addresses
        ):
            raise ValueError("every seed of a Redis Cluster has the same scheme and credentials")

    @property
    def urls(self) -> list[str]:
        """``url``, or each URL of its list, in order."""
        return [self.url] if isinstance(self.url, str) else list(self.url)

    @property
    def description(self) -> str:
        """Where Redis is, without credentials (every seed of a list), for logs."""
        return ", ".join(RedisAddress(url).description for url in self.urls)


class OnUnavailable(Struct, frozen=True, forbid_unknown_fields=True):
    """Each use's failure policy (module docstring)."""

    limits: Literal["local", "open", "closed"] = "local"
    budgets: Literal["closed", "open", "local"] = "closed"
    cache: Literal["open"] = "open"
    health: Literal["local", "open"] = "local"


class StateConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The ``state:`` section (module docstring)."""

    backend: Backend = "memory"
    redis: RedisConfig = RedisConfig()
    on_unavailable: OnUnavailable = msgspec.field(default_factory=OnUnavailable)


_USES_OF_PLUGINS: dict[str, tuple[Use, ...]] = {
    "limits": ("limits",),
    "cost": ("budgets",),
    "cache": ("cache",),
    "balance": ("health",),
}


def per_worker(state: StateConfig, plugins: Iterable[str], workers: int) -> list[Use]:
    """The uses of state that the built-in ``plugins`` (their names, in chain order) keep per
    worker process: with ``workers > 1`` and the memory backend, limits, budgets, cache entries
    and deployment health are each worker's own (a key with ``rpm: 60`` gets 60 per worker)."""
    if workers <= 1 or state.backend != "memory":
        return []
    found: list[Use] = []
    for name in plugins:
        for use in _USES_OF_PLUGINS.get(name, ()):
            if use not in found:
                found.append(use)
    return found


def per_worker_message(uses: list[Use], workers: int) -> str:
    """What ``check`` and the start-up log say about :func:`per_worker`'s answer."""
    return (
        f"state.backend is memory with {workers} workers: {', '.join(uses)} are per worker "
        "(each worker counts and caches on its own); set state.backend: redis to share them"
    )
