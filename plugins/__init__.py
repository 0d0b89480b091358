"""Crossway's built-in plugins, one module each, loadable by name from the YAML ``plugins:`` list.

``BUILTINS`` maps each name to its ``module:Class``; the loader imports only what a config uses,
so an unused plugin costs nothing.
"""

BUILTINS: dict[str, str] = {
    "auth": "plugins.auth:AuthPlugin",
    "limits": "plugins.limits:LimitsPlugin",
    "headers": "plugins.headers:HeadersPlugin",
    "cache": "plugins.cache:CachePlugin",
    "retry": "plugins.retry:RetryPlugin",
    "fallback": "plugins.fallback:FallbackPlugin",
    "balance": "plugins.balance:BalancePlugin",
    "cost": "plugins.cost:CostPlugin",
    "masking": "plugins.masking:MaskingPlugin",
}
