"""The ``state:`` section of the config file: where shared state lives and what each use does
when that place cannot answer.

```yaml
state:
  backend: redis                       # memory (default) | redis
  redis:
    url: "${REDIS_URL:-redis://127.0.0.1:6379/0}"   # redis://, rediss:// (TLS), unix://
    cluster: false                     # Redis Cluster
    timeout_ms: 50                     # per operation; past it the use's failure policy applies
    breaker: {failures: 3, cooldown_ms: 1000}
    max_idle: 2592000                  # seconds a key written without a TTL outlives its last write
  on_unavailable: {limits: local, budgets: closed, cache: open, health: local}
```

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

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

Backend = Literal["memory", "redis"]
Use = Literal["limits", "budgets", "cache", "health"]
USES: tuple[Use, ...] = ("limits", "budgets", "cache", "health")
_REDIS_URL = r"^(redis|rediss|unix)://.+$"


class BreakerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """After ``failures`` consecutive failed operations the store stops calling Redis; a probe
    every ``cooldown_ms`` closes the breaker again once Redis answers."""

    failures: Annotated[int, Meta(ge=1)] = 3
    cooldown_ms: Annotated[int, Meta(ge=10, le=60_000)] = 1000


class RedisConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """How to reach Redis; see the module docstring. The URL may carry a password
    (``redis://:secret@host``): it is never logged."""

    url: Annotated[str, Meta(pattern=_REDIS_URL)] = "redis://127.0.0.1:6379/0"
    cluster: bool = False
    timeout_ms: Annotated[int, Meta(ge=1, le=60_000)] = 50
    breaker: BreakerConfig = BreakerConfig()
    max_idle: Annotated[int, Meta(ge=60)] = 2_592_000


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
