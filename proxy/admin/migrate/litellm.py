"""A LiteLLM proxy config (``config.yaml``) → a Crossway config, as plain trees.

:func:`translate` is pure: it reads the parsed LiteLLM tree and returns a
:class:`~proxy.admin.migrate.result.Translation` — the Crossway tree, every setting it could not
carry over (with the reason) and notes on what behaves differently on purpose. ``model_list`` is
:mod:`proxy.admin.migrate.litellm_models`' job, the three settings sections
:mod:`proxy.admin.migrate.litellm_settings`'. ``credential_list`` entries are merged into the models
that name them; a Presidio ``guardrails`` entry becomes the masking plugin
(:mod:`proxy.admin.migrate.litellm_guardrails`); ``environment_variables`` are not set (the
environment is the deployment's).
"""

from __future__ import annotations

from typing import Any

from proxy.admin.migrate.litellm_guardrails import translate_guardrails
from proxy.admin.migrate.litellm_models import Clocks, translate_models
from proxy.admin.migrate.litellm_settings import section, translate_settings
from proxy.admin.migrate.result import Translation

_KNOWN = frozenset(
    {
        "model_list",
        "router_settings",
        "litellm_settings",
        "general_settings",
        "credential_list",
        "guardrails",
    }
)
_REASONS = {
    "environment_variables": "set these in the gateway's environment: Crossway reads ${NAME}",
    "include": "Crossway reads one file: merge the included files first",
    "mcp_servers": "Crossway has no MCP gateway",
}


def translate(tree: Any) -> Translation:
    """Translate a parsed LiteLLM config (module docstring). Never raises on bad input: what
    cannot be read is reported in the result."""
    result = Translation()
    if not isinstance(tree, dict):
        result.skip("$", "a LiteLLM config is a mapping")
        return result
    for key in sorted(set(tree) - _KNOWN):
        reason = _REASONS.get(key, "not a LiteLLM config section Crossway knows")
        result.skip(f"$.{key}", reason)
    router = section(tree, "router_settings", Translation())
    settings = section(tree, "litellm_settings", Translation())
    clocks = Clocks(
        timeout=router.get("timeout", settings.get("request_timeout")),
        stream_timeout=router.get("stream_timeout"),
    )
    table = translate_models(
        tree.get("model_list"), result, clocks, _credentials(tree.get("credential_list"), result)
    )
    masking = translate_guardrails(tree.get("guardrails"), result)
    rest = translate_settings(tree, table, result, masking)
    config: dict[str, Any] = {"providers": table.providers, "models": table.aliases}
    config.update(rest)
    result.config = config
    return result


def _credentials(node: Any, result: Translation) -> dict[str, dict[str, Any]]:
    """``credential_list``: ``[{credential_name, credential_values: {api_key, api_base, …}}]``."""
    credentials: dict[str, dict[str, Any]] = {}
    if node is None:
        return credentials
    for index, entry in enumerate(node if isinstance(node, list) else [node]):
        name = entry.get("credential_name") if isinstance(entry, dict) else None
        values = entry.get("credential_values") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(values, dict):
            result.skip(f"$.credential_list[{index}]", "expected credential_name and values")
            continue
        credentials[name] = values
    return credentials
