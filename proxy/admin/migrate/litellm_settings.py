"""LiteLLM's ``router_settings``, ``litellm_settings`` and ``general_settings`` → Crossway's
plugin chain, ``state``, ``auth`` and ``database``.

The chain is built in the order Crossway's plugins want: ``auth`` → ``limits`` (with a master
key) → ``masking`` (from a Presidio guardrail) → ``cache`` → ``cost`` (with a master key, a
database or prices) → ``fallback`` → ``retry`` → ``balance``. What each setting becomes:

- ``routing_strategy`` → ``balance.strategy`` (simple-shuffle → weighted, least-busy,
  latency-based-routing → latency, cost-based-routing → cost); ``allowed_fails`` /
  ``cooldown_time`` → ``balance.health`` (``failures`` / ``cooldown``);
- ``num_retries`` (router first, then litellm_settings) → ``retry.retries``; ``retry_policy``
  → the statuses retried (a policy retrying 4xx other than 429 cannot be followed);
- ``fallbacks`` / ``default_fallbacks`` → ``fallback.chains``, ``context_window_fallbacks`` →
  ``on_context_window``, ``content_policy_fallbacks`` → ``on_content_policy`` (one model each:
  Crossway tries one such fallback);
- ``redis_host`` / ``redis_port`` / ``redis_password`` / ``redis_url`` (or ``cache_params``'s)
  → ``state: {backend: redis, redis: {url}}``;
- ``cache`` + ``cache_params`` → the ``cache`` plugin: ``redis`` (LiteLLM's default) → the
  ``store`` backend on Redis, ``local`` → ``memory``; ``ttl``; ``mode: default_off`` →
  ``opt_in``; ``redis-semantic`` / ``qdrant-semantic`` → ``semantic: {embedding_model,
  threshold}`` (``*_semantic_cache_embedding_model``, ``similarity_threshold``). Entries stay
  scoped by team, on purpose (a note says so);
- ``master_key`` → ``auth.master_key``; ``database_url`` → ``database.url``.
"""

from __future__ import annotations

from typing import Any

from proxy.admin.migrate.litellm_models import ModelTable
from proxy.admin.migrate.result import Translation, env_value

_STRATEGIES = {
    "simple-shuffle": "weighted",
    "least-busy": "least-busy",
    "latency-based-routing": "latency",
    "cost-based-routing": "cost",
}
_ROUTER_KEYS = frozenset(
    {
        "routing_strategy",
        "num_retries",
        "retry_policy",
        "allowed_fails",
        "cooldown_time",
        "fallbacks",
        "context_window_fallbacks",
        "content_policy_fallbacks",
        "default_fallbacks",
        "redis_host",
        "redis_port",
        "redis_password",
        "redis_url",
        "timeout",
        "stream_timeout",
        "model_group_alias",
    }
)
_LITELLM_KEYS = frozenset(
    {
        "cache",
        "cache_params",
        "num_retries",
        "request_timeout",
        "fallbacks",
        "context_window_fallbacks",
        "content_policy_fallbacks",
        "default_fallbacks",
        "drop_params",
        "set_verbose",
        "json_logs",
        "callbacks",
        "success_callback",
        "failure_callback",
    }
)
_GENERAL_KEYS = frozenset({"master_key", "database_url", "disable_spend_logs"})
_MIN_MASTER_KEY = 32
_RETRYABLE = {
    "RateLimitErrorRetries": (429,),
    "InternalServerErrorRetries": (500, 502, 503, 504),
    "TimeoutErrorRetries": (),
}
_NEVER_RETRIED = (
    "BadRequestErrorRetries",
    "AuthenticationErrorRetries",
    "ContentPolicyViolationErrorRetries",
)


def section(tree: dict[str, Any], name: str, result: Translation) -> dict[str, Any]:
    """The mapping ``tree[name]`` ({} when absent; reported when it is not a mapping)."""
    node = tree.get(name)
    if node is None:
        return {}
    if not isinstance(node, dict):
        result.skip(f"$.{name}", "expected a mapping")
        return {}
    return node


def translate_settings(
    tree: dict[str, Any],
    table: ModelTable,
    result: Translation,
    masking: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The config sections other than ``providers`` and ``models``: ``plugins`` (with the
    ``masking`` options, when given, after ``auth``/``limits``) and, where the source has them,
    ``state``, ``auth`` and ``database``. Adds ``model_group_alias`` aliases to ``table``."""
    router = section(tree, "router_settings", result)
    settings = section(tree, "litellm_settings", result)
    general = section(tree, "general_settings", result)
    _report_unknown(router, _ROUTER_KEYS, "router_settings", result)
    _report_unknown(settings, _LITELLM_KEYS, "litellm_settings", result)
    _report_unknown(general, _GENERAL_KEYS, "general_settings", result)
    _group_aliases(router.get("model_group_alias"), table, result)
    _callbacks(settings, result)
    out: dict[str, Any] = {}
    plugins: list[dict[str, Any]] = []
    master_key = _master_key(general.get("master_key"), result)
    if master_key is not None:
        out["auth"] = {"master_key": master_key}
        plugins += [{"auth": {}}, {"limits": {}}]
    if masking is not None:
        plugins.append({"masking": masking})
    if "database_url" in general:
        out["database"] = {"url": env_value(general["database_url"])}
    redis_url = _redis_url(router, settings.get("cache_params") or {})
    cache = _cache(settings, redis_url is not None, table.aliases, result)
    if cache is not None:
        plugins.append({"cache": cache})
    if redis_url is not None:
        out["state"] = {"backend": "redis", "redis": {"url": redis_url}}
    priced = any("prices" in d for ds in table.aliases.values() for d in ds)
    if master_key is not None or "database_url" in general or priced:
        cost: dict[str, Any] = {}
        if general.get("disable_spend_logs") is True:
            cost["ledger"] = False
        plugins.append({"cost": cost})
    fallback = _fallback(router, settings, table, result)
    if fallback:
        plugins.append({"fallback": fallback})
    retry = _retry(router, settings, result)
    if retry is not None:
        plugins.append({"retry": retry})
    plugins.append({"balance": _balance(router, table, result)})
    out["plugins"] = plugins
    for name in ("drop_params", "set_verbose", "json_logs"):
        if name in settings:
            result.notes.append(f"$.litellm_settings.{name}: {_NOTES[name]}")
    return out


_NOTES = {
    "drop_params": "no switch needed: each preset drops the fields its vendor rejects",
    "set_verbose": "use server.log_level: debug",
    "json_logs": "Crossway's logs are always JSON lines",
}


def _report_unknown(
    node: dict[str, Any], known: frozenset[str], name: str, result: Translation
) -> None:
    for key in sorted(set(node) - known):
        result.skip(f"$.{name}.{key}", "no Crossway equivalent for this setting")


def _callbacks(settings: dict[str, Any], result: Translation) -> None:
    for name in ("callbacks", "success_callback", "failure_callback"):
        values = settings.get(name)
        if values is None:
            continue
        for value in values if isinstance(values, list) else [values]:
            if value == "prometheus":
                result.notes.append(
                    f"$.litellm_settings.{name}: prometheus — GET /metrics is always on"
                )
            else:
                result.skip(
                    f"$.litellm_settings.{name}",
                    f"callback {value!r}: Crossway has no logging callbacks (use its JSON "
                    "access log, /metrics and the spend ledger)",
                )


def _group_aliases(node: Any, table: ModelTable, result: Translation) -> None:
    if node is None:
        return
    if not isinstance(node, dict):
        result.skip("$.router_settings.model_group_alias", "expected a mapping")
        return
    for alias, target in node.items():
        name = target.get("model") if isinstance(target, dict) else target
        if name not in table.aliases:
            result.skip(f"$.router_settings.model_group_alias.{alias}", "unknown model group")
            continue
        table.aliases[str(alias)] = [dict(d) for d in table.aliases[name]]


def _master_key(value: Any, result: Translation) -> Any:
    if value is None:
        return None
    key = env_value(value)
    if isinstance(key, str) and not key.startswith("${") and len(key) < _MIN_MASTER_KEY:
        result.skip(
            "$.general_settings.master_key",
            f"a literal master key shorter than {_MIN_MASTER_KEY} characters: Crossway refuses "
            "it; the config reads ${CROSSWAY_MASTER_KEY} instead",
        )
        return "${CROSSWAY_MASTER_KEY}"
    return key


def _redis_url(router: dict[str, Any], cache_params: dict[str, Any]) -> str | None:
    """Redis from router_settings, else from the cache's own parameters; None without one."""
    for source in (router, cache_params):
        if "redis_url" in source or "url" in source:
            return str(env_value(source.get("redis_url", source.get("url"))))
        host = source.get("redis_host", source.get("host"))
        if host is None:
            continue
        port = source.get("redis_port", source.get("port", 6379))
        password = source.get("redis_password", source.get("password"))
        scheme = "rediss" if source.get("ssl") is True else "redis"
        auth = "" if password is None else f":{env_value(password)}@"
        return f"{scheme}://{auth}{env_value(host)}:{env_value(port)}/0"
    return None


def _cache(
    settings: dict[str, Any], has_redis: bool, aliases: Any, result: Translation
) -> dict[str, Any] | None:
    if not settings.get("cache"):
        return None
    params = settings.get("cache_params") or {}
    kind = params.get("type", "redis")
    cache: dict[str, Any] = {}
    path = "$.litellm_settings.cache_params"
    if kind == "local":
        cache["backend"] = "memory"
    elif kind in ("redis", "redis-semantic") and has_redis:
        cache["backend"] = "store"
    elif kind == "redis":
        cache["backend"] = "store"
        result.skip(path, "no Redis host given: set state.redis.url (the cache uses the store)")
    else:
        cache["backend"] = "memory"
    if kind.endswith("-semantic"):
        semantic = _semantic(params, kind, aliases, result)
        if semantic is not None:
            cache["semantic"] = semantic
    elif kind not in ("local", "redis"):
        result.skip(f"{path}.type", f"{kind}: no such backend; the in-memory cache is configured")
    if "ttl" in params:
        cache["ttl"] = env_value(params["ttl"])
    if params.get("mode") == "default_off":
        cache["mode"] = "opt_in"
    for key in sorted(set(params) - _CACHE_PARAMS):
        result.skip(f"{path}.{key}", "no Crossway equivalent for this cache setting")
    result.notes.append(
        "$.litellm_settings.cache: entries are scoped by team (cache.scope: team), not shared by "
        "every key as LiteLLM's are; set scope: global for LiteLLM's behaviour"
    )
    return cache


def _semantic(
    params: dict[str, Any], kind: str, aliases: Any, result: Translation
) -> dict[str, Any] | None:
    """``cache.semantic`` from LiteLLM's semantic cache: its embedding model (a model_name of
    the config) and ``similarity_threshold``; Qdrant itself is not used (the vectors live in the
    gateway, shared through the state store with ``backend: store``)."""
    path = "$.litellm_settings.cache_params"
    name = "qdrant" if kind.startswith("qdrant") else "redis"
    model = params.get(f"{name}_semantic_cache_embedding_model")
    if model not in aliases:
        result.skip(
            f"{path}.{name}_semantic_cache_embedding_model",
            f"{model!r} is not a model of this config: the semantic cache needs one; an "
            "exact-match cache is configured",
        )
        return None
    semantic: dict[str, Any] = {"embedding_model": model}
    if "similarity_threshold" in params:
        semantic["threshold"] = env_value(params["similarity_threshold"])
    if name == "qdrant":
        result.notes.append(
            f"{path}: no Qdrant: the semantic cache's vectors are kept by the gateway"
        )
    return semantic


_CACHE_PARAMS = frozenset(
    {"type", "ttl", "mode", "host", "port", "password", "url", "ssl", "similarity_threshold"}
)
_CACHE_PARAMS |= {"redis_semantic_cache_embedding_model", "supported_call_types", "namespace"}
_CACHE_PARAMS |= {"qdrant_semantic_cache_embedding_model", "qdrant_collection_name"}
_CACHE_PARAMS |= {"qdrant_api_base", "qdrant_api_key", "qdrant_quantization_config"}


def _fallback(
    router: dict[str, Any], settings: dict[str, Any], table: ModelTable, result: Translation
) -> dict[str, Any]:
    """The fallback plugin's options: the order groups first, then the configured chains."""
    chains: dict[str, list[str]] = {
        alias: list(names) for alias, names in table.order_chains.items()
    }
    for name in ("fallbacks", "default_fallbacks"):
        source = "router_settings" if name in router else "litellm_settings"
        value = router.get(name, settings.get(name))
        if value is None:
            continue
        path = f"$.{source}.{name}"
        if name == "default_fallbacks":
            ordered = {name for chain in table.order_chains.values() for name in chain}
            pairs = [(alias, value) for alias in table.aliases if alias not in ordered]
        else:
            pairs = _pairs(value, path, result)
        for alias, targets in pairs:
            known = _known(targets, table, f"{path}.{alias}", result)
            chain = chains.setdefault(alias, [])
            chain += [t for t in known if t not in chain and t != alias]
    options: dict[str, Any] = {}
    chains = {alias: chain for alias, chain in chains.items() if chain}
    if chains:
        options["chains"] = chains
    for name, option in (
        ("context_window_fallbacks", "on_context_window"),
        ("content_policy_fallbacks", "on_content_policy"),
    ):
        source = "router_settings" if name in router else "litellm_settings"
        value = router.get(name, settings.get(name))
        if value is None:
            continue
        path = f"$.{source}.{name}"
        single: dict[str, str] = {}
        for alias, targets in _pairs(value, path, result):
            known = _known(targets, table, f"{path}.{alias}", result)
            if known:
                single[alias] = known[0]
            if len(known) > 1:
                result.skip(
                    f"{path}.{alias}",
                    f"Crossway tries one {option} fallback: {known[0]!r} kept, "
                    f"{', '.join(known[1:])} left out",
                )
        if single:
            options[option] = single
    return options


def _pairs(value: Any, path: str, result: Translation) -> list[tuple[str, list[Any]]]:
    """LiteLLM's ``[{model: [fallback, …]}, …]`` as (model, fallbacks) pairs."""
    pairs: list[tuple[str, list[Any]]] = []
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict):
            result.skip(path, "expected [{model: [fallbacks]}]")
            continue
        for alias, targets in item.items():
            pairs.append((str(alias), targets if isinstance(targets, list) else [targets]))
    return pairs


def _known(targets: list[Any], table: ModelTable, path: str, result: Translation) -> list[str]:
    known: list[str] = []
    for target in targets:
        if isinstance(target, str) and target in table.aliases:
            known.append(target)
        else:
            result.skip(path, f"fallback {target!r} is not a model of this config")
    return known


def _retry(
    router: dict[str, Any], settings: dict[str, Any], result: Translation
) -> dict[str, Any] | None:
    retries = router.get("num_retries", settings.get("num_retries"))
    policy = router.get("retry_policy")
    if retries is None and policy is None:
        return None
    options: dict[str, Any] = {}
    counts = [retries] if isinstance(retries, int) else []
    if isinstance(policy, dict):
        statuses: list[int] = []
        for name, count in policy.items():
            path = f"$.router_settings.retry_policy.{name}"
            if name in _NEVER_RETRIED:
                if count:
                    result.skip(path, "Crossway never retries a request the upstream refused")
                continue
            if name not in _RETRYABLE:
                result.skip(path, "no such retry policy")
                continue
            if count:
                counts.append(int(count))
                statuses += _RETRYABLE[name]
            elif name == "TimeoutErrorRetries":
                options["on_timeout"] = False
        options["on_status"] = sorted(set(statuses))
        if len({*counts}) > 1:
            result.skip(
                "$.router_settings.retry_policy",
                "Crossway has one retry count for every retried error: the largest is used",
            )
    elif policy is not None:
        result.skip("$.router_settings.retry_policy", "expected a mapping")
    count = max(counts, default=0)
    if count > 10:
        result.skip("$.router_settings.num_retries", "at most 10 retries: 10 is used")
        count = 10
    options["retries"] = count
    options["max_retries"] = max(5, count)
    return options


def _balance(router: dict[str, Any], table: ModelTable, result: Translation) -> dict[str, Any]:
    options: dict[str, Any] = {}
    strategy = router.get("routing_strategy")
    if strategy is not None:
        if strategy in _STRATEGIES:
            options["strategy"] = _STRATEGIES[strategy]
        else:
            result.skip(
                "$.router_settings.routing_strategy",
                f"{strategy!r} has no Crossway equivalent: weighted is used",
            )
    health: dict[str, Any] = {}
    if "allowed_fails" in router:
        health["failures"] = router["allowed_fails"]
    if "cooldown_time" in router:
        cooldown = router["cooldown_time"]
        health["cooldown"] = cooldown
        if isinstance(cooldown, int | float) and cooldown > 300:
            health["max_cooldown"] = cooldown
    if health:
        options["health"] = health
        result.notes.append(
            "$.router_settings.allowed_fails: Crossway ejects after that many consecutive "
            "failures (LiteLLM counts failures per minute)"
        )
    if table.limits:
        options["limits"] = table.limits
    return options
