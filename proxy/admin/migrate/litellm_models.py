"""LiteLLM's ``model_list`` → Crossway's ``providers`` and ``models``.

Each entry's ``litellm_params.model`` (``azure/…``, ``groq/…``, a bare ``gpt-4o`` …) names a
LiteLLM provider; it becomes a provider of the matching type or preset (:data:`FAMILIES`) and
the target ``<provider>/<model>``. Entries whose credentials, base URL and clocks are identical
share one provider; entries with one ``model_name`` become one alias with several deployments.
What the deployment-level settings become:

- ``rpm`` / ``tpm`` → the ``balance`` plugin's per-deployment ``limits`` (returned in
  :attr:`ModelTable.limits`); ``weight`` → the deployment's weight (without weights, LiteLLM's
  simple-shuffle weighs by ``rpm``, else ``tpm``: so does the translation);
- ``order`` → the lowest order stays in the alias; each higher order becomes an alias of its own
  (``<alias>--order-<n>``; ``<alias>--unordered`` for entries without one, which LiteLLM tries
  last) that the alias falls back to, in order (:attr:`ModelTable.order_chains`);
- ``timeout`` → the provider's ``total`` clock (and ``first_byte`` at most that);
  ``stream_timeout`` → its ``idle`` clock (LiteLLM's is a read timeout between stream bytes);
- ``input_cost_per_token`` / ``output_cost_per_token`` (and the cache read / creation costs),
  in ``model_info`` or ``litellm_params`` → the deployment's ``prices``, per million tokens;
- ``os.environ/NAME`` → ``${NAME}``; a credential LiteLLM would read from its default variable
  (``OPENAI_API_KEY`` …) when absent is written as that variable, ``${NAME:-}``: unset, the
  provider is not ready (as LiteLLM fails such calls), the gateway still starts.

Chat, embedding and media entries (``model_info.mode`` absent, ``chat``, ``completion``,
``responses``, ``embedding``, ``audio_speech``, ``audio_transcription``, ``image_generation``,
``image_edit``, ``moderation``, ``rerank``) are translated alike: an alias serves whichever
route the client calls. Anything else is reported through
:meth:`~proxy.admin.migrate.result.Translation.skip`.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any, NamedTuple

from proxy.admin.migrate.result import Translation, env_value


class Family(NamedTuple):
    """A LiteLLM provider as Crossway serves it: provider ``type``, ``preset`` and the variable
    LiteLLM reads the key from when ``api_key`` is absent (None: the server needs none)."""

    type: str
    preset: str | None
    key_env: str | None


FAMILIES: dict[str, Family] = {
    "openai": Family("openai", None, "OPENAI_API_KEY"),
    "azure": Family("azure", None, "AZURE_API_KEY"),
    "anthropic": Family("anthropic", None, "ANTHROPIC_API_KEY"),
    "gemini": Family("gemini", None, "GEMINI_API_KEY"),
    "bedrock": Family("bedrock", None, None),
    "groq": Family("openai", "groq", "GROQ_API_KEY"),
    "mistral": Family("openai", "mistral", "MISTRAL_API_KEY"),
    "together_ai": Family("openai", "together", "TOGETHERAI_API_KEY"),
    "deepseek": Family("openai", "deepseek", "DEEPSEEK_API_KEY"),
    "xai": Family("openai", "xai", "XAI_API_KEY"),
    "fireworks_ai": Family("openai", "fireworks", "FIREWORKS_AI_API_KEY"),
    "openrouter": Family("openai", "openrouter", "OPENROUTER_API_KEY"),
    "perplexity": Family("openai", "perplexity", "PERPLEXITYAI_API_KEY"),
    "hosted_vllm": Family("openai", "vllm", None),
    "ollama": Family("openai", "ollama", None),
    "ollama_chat": Family("openai", "ollama", None),
    "lm_studio": Family("openai", "lmstudio", None),
}
"""LiteLLM provider prefix → what serves it here."""

_BARE_MODELS: tuple[tuple[str, str], ...] = (
    ("gpt-", "openai"),
    ("chatgpt-", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
)
_BARE_MODELS += (("o4", "openai"), ("claude", "anthropic"))
_SERVED_MODES = (
    None,
    "chat",
    "completion",
    "responses",
    "embedding",
    "audio_speech",
    "audio_transcription",
    "image_generation",
    "image_edit",
    "moderation",
    "rerank",
)
_ENTRY_KEYS = frozenset({"model_name", "litellm_params", "model_info"})
_DEPLOYMENT_KEYS = frozenset({"model", "rpm", "tpm", "weight", "order", "timeout"})
_DEPLOYMENT_KEYS |= {"stream_timeout", "litellm_credential_name"}
_PRICE_FIELDS = {
    "input_cost_per_token": "input",
    "output_cost_per_token": "output",
    "cache_read_input_token_cost": "cache_read",
    "cache_creation_input_token_cost": "cache_write",
}
_MILLION = Decimal(1_000_000)
_SIX_PLACES = Decimal("0.000001")


@dataclasses.dataclass(frozen=True)
class Clocks:
    """Default clocks (seconds) for deployments that set none: LiteLLM's ``request_timeout``
    / ``router_settings.timeout`` and ``router_settings.stream_timeout``."""

    timeout: Any = None
    stream_timeout: Any = None


@dataclasses.dataclass
class ModelTable:
    """The translated model list: providers by name, aliases (deployment mappings in order),
    ``limits`` by target (``{rpm, tpm}``) and ``order_chains`` (alias → its higher orders)."""

    providers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    aliases: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    limits: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    order_chains: dict[str, list[str]] = dataclasses.field(default_factory=dict)


class _Deployment(NamedTuple):
    order: Any
    target: str
    weight: Any
    rpm: Any
    tpm: Any
    prices: dict[str, float] | None


def translate_models(
    model_list: Any,
    result: Translation,
    clocks: Clocks = Clocks(),
    credentials: dict[str, dict[str, Any]] | None = None,
) -> ModelTable:
    """Translate ``model_list`` (see the module docstring); untranslatable parts go to
    ``result``. ``credentials`` are LiteLLM's ``credential_list`` values by name."""
    table = ModelTable()
    if model_list is None:
        return table
    if not isinstance(model_list, list):
        result.skip("$.model_list", "expected a list of models")
        return table
    builder = _Builder(table, result, clocks, credentials or {})
    for index, entry in enumerate(model_list):
        builder.entry(f"$.model_list[{index}]", entry)
    builder.finish()
    return table


class _Builder:
    def __init__(
        self,
        table: ModelTable,
        result: Translation,
        clocks: Clocks,
        credentials: dict[str, dict[str, Any]],
    ) -> None:
        self._table = table
        self._result = result
        self._clocks = clocks
        self._credentials = credentials
        self._by_identity: dict[str, str] = {}
        self._entries: dict[str, list[_Deployment]] = {}
        self._prices: dict[str, dict[str, float]] = {}

    def entry(self, path: str, entry: Any) -> None:
        result = self._result
        if not isinstance(entry, dict) or not isinstance(entry.get("model_name"), str):
            result.skip(path, "expected a mapping with model_name and litellm_params")
            return
        for key in sorted(set(entry) - _ENTRY_KEYS):
            result.skip(f"{path}.{key}", "not a model_list field Crossway knows")
        alias = entry["model_name"]
        params = dict(entry.get("litellm_params") or {})
        info = dict(entry.get("model_info") or {})
        if info.get("mode") not in _SERVED_MODES:
            result.skip(
                path,
                f"mode {info['mode']!r}: Crossway serves chat, embedding, audio, image, "
                "moderation and rerank models",
            )
            return
        credential = params.get("litellm_credential_name")
        if credential is not None:
            if credential not in self._credentials:
                result.skip(f"{path}.litellm_params.litellm_credential_name", "unknown credential")
            params = {**self._credentials.get(credential, {}), **params}
        model = params.get("model")
        if not isinstance(model, str) or not model:
            result.skip(f"{path}.litellm_params.model", "expected 'provider/model'")
            return
        prefix: str | None
        prefix, _, upstream = model.partition("/")
        if not upstream:
            prefix, upstream = _bare_family(model), model
        family = FAMILIES.get(prefix) if prefix is not None else None
        if prefix is None or family is None:
            result.skip(f"{path}.litellm_params.model", _unknown_family(model, prefix))
            return
        if "*" in alias or "*" in upstream:
            self._wildcard(path, alias, prefix, family, params)
            return
        if family.type == "bedrock":
            upstream = _bedrock_model(upstream, f"{path}.litellm_params.model", result)
        provider, used = _provider(family, params, self._clocks, f"{path}.litellm_params", result)
        name = self._register(provider, family)
        upstream = self._azure_mapping(name, upstream, info, family)
        for key in sorted(set(params) - _DEPLOYMENT_KEYS - used - set(_PRICE_FIELDS)):
            result.skip(f"{path}.litellm_params.{key}", "no Crossway equivalent for this setting")
        prices = _prices({**info, **params}, path, result)
        deployment = _Deployment(
            params.get("order"),
            f"{name}/{upstream}",
            params.get("weight"),
            params.get("rpm"),
            params.get("tpm"),
            prices,
        )
        self._entries.setdefault(alias, []).append(deployment)
        informational = sorted(set(info) - {"id", "mode", "base_model", *_PRICE_FIELDS})
        if informational:
            result.notes.append(
                f"{path}.model_info: {', '.join(informational)} are informational, not carried"
            )

    def _wildcard(
        self, path: str, alias: str, prefix: str, family: Family, params: dict[str, Any]
    ) -> None:
        provider, _ = _provider(
            family, params, self._clocks, f"{path}.litellm_params", self._result
        )
        name = self._register(provider, family)
        if alias == f"{name}/*":
            self._result.notes.append(
                f"{path}: {alias!r} is served as Crossway's provider/model addressing"
            )
            return
        self._result.skip(
            path,
            f"wildcard model_name {alias!r}: Crossway has no wildcard aliases; clients may "
            f"address these models as {name}/<model>",
        )

    def _register(self, provider: dict[str, Any], family: Family) -> str:
        """The name of the provider with exactly these settings, registering it if new."""
        identity = json.dumps(provider, sort_keys=True, default=str)
        known = self._by_identity.get(identity)
        if known is not None:
            return known
        base = family.preset or family.type
        name, n = base, 1
        while name in self._table.providers:
            n += 1
            name = f"{base}-{n}"
        self._by_identity[identity] = name
        self._table.providers[name] = provider
        return name

    def _azure_mapping(
        self, name: str, deployment: str, info: dict[str, Any], family: Family
    ) -> str:
        """Azure's model name: ``model_info.base_model`` when given (so that it is priced from
        the catalog), mapped to the deployment in the path; else the deployment name."""
        base = info.get("base_model")
        if family.type != "azure" or not isinstance(base, str):
            return deployment
        base = base.removeprefix("azure/")
        mapping = self._table.providers[name].setdefault("deployments", {})
        if mapping.get(base, deployment) != deployment:
            return deployment
        mapping[base] = deployment
        return base

    def finish(self) -> None:
        for alias, deployments in self._entries.items():
            orders = sorted({d.order for d in deployments}, key=_order_key)
            names = [alias if i == 0 else _order_alias(alias, o) for i, o in enumerate(orders)]
            for order, name in zip(orders, names, strict=True):
                group = [d for d in deployments if d.order == order]
                self._table.aliases[name] = self._group(name, group)
            if len(names) > 1:
                self._table.order_chains[alias] = names[1:]

    def _group(self, alias: str, group: list[_Deployment]) -> list[dict[str, Any]]:
        if any(d.weight is not None for d in group):
            weights = [1 if d.weight is None else d.weight for d in group]
        elif all(d.rpm is not None for d in group):
            weights = [d.rpm for d in group]
        elif all(d.tpm is not None for d in group):
            weights = [d.tpm for d in group]
        else:
            weights = [1] * len(group)
        merged: dict[str, dict[str, Any]] = {}
        for deployment, weight in zip(group, weights, strict=True):
            self._limit(deployment)
            item = merged.get(deployment.target)
            if item is not None:  # the same model on the same provider twice: one deployment
                item["weight"] = item.get("weight", 1) + weight
                continue
            item = {"target": deployment.target}
            if len(group) > 1:
                item["weight"] = weight
            if deployment.prices is not None and self._priced(alias, deployment):
                item["prices"] = deployment.prices
            merged[deployment.target] = item
        return list(merged.values())

    def _limit(self, deployment: _Deployment) -> None:
        for field in ("rpm", "tpm"):
            value = getattr(deployment, field)
            if value is None:
                continue
            limits = self._table.limits.setdefault(deployment.target, {})
            limits[field] = limits.get(field, 0) + int(value)

    def _priced(self, alias: str, deployment: _Deployment) -> bool:
        """Crossway prices a target once: a second, different price is reported."""
        assert deployment.prices is not None
        known = self._prices.setdefault(deployment.target, deployment.prices)
        if known != deployment.prices:
            self._result.skip(
                f"$.model_list[model_name={alias}].model_info",
                f"{deployment.target} is priced differently by another entry: the first price "
                "is kept",
            )
            return False
        return True


def _order_alias(alias: str, order: Any) -> str:
    """The alias of a higher order's deployments (LiteLLM tries those without an order only
    after every ordered one)."""
    return f"{alias}--unordered" if order is None else f"{alias}--order-{order}"


def _order_key(order: Any) -> tuple[bool, float]:
    return (order is None, 0.0 if order is None else float(order))


def _bare_family(model: str) -> str | None:
    """LiteLLM's provider for a model named without a prefix (``gpt-4o`` is OpenAI's)."""
    for start, family in _BARE_MODELS:
        if model.startswith(start):
            return family
    return None


def _unknown_family(model: str, prefix: str | None) -> str:
    if prefix is None:
        return f"cannot tell the provider of {model!r}: write it as 'provider/model'"
    if prefix.startswith("vertex_ai"):
        return "Vertex AI is not a Crossway provider: use gemini/ with an API key, or bedrock/"
    return f"LiteLLM provider {prefix!r} has no Crossway provider or preset"


def _bedrock_model(model: str, path: str, result: Translation) -> str:
    if model.startswith("converse/"):
        return model.removeprefix("converse/")
    if model.startswith("invoke/"):
        result.notes.append(f"{path}: served through Bedrock's Converse API, not InvokeModel")
        return model.removeprefix("invoke/")
    return model


def _provider(
    family: Family, params: dict[str, Any], clocks: Clocks, path: str, result: Translation
) -> tuple[dict[str, Any], set[str]]:
    """The provider mapping for ``params`` and the parameter names it used."""
    used: set[str] = set()

    def take(name: str) -> Any:
        if name in params:
            used.add(name)
        return env_value(params.get(name))

    def credential(name: str, default_env: str | None) -> Any:
        if name in params:
            used.add(name)
            return env_value(params[name], default="")
        return None if default_env is None else f"${{{default_env}:-}}"

    provider: dict[str, Any] = {"type": family.type}
    api_base = take("api_base")
    if family.type == "openai":
        if family.preset is not None:
            provider["preset"] = family.preset
        if api_base is not None:
            provider["base_url"] = _openai_base(api_base, family)
        key = credential("api_key", family.key_env)
        if key is not None:
            provider["api_key"] = key
        headers = dict(take("extra_headers") or {})
        organization = take("organization")
        if organization is not None:
            headers["OpenAI-Organization"] = organization
        if headers:
            provider["headers"] = headers
    elif family.type == "azure":
        provider["endpoint"] = api_base if api_base is not None else "${AZURE_API_BASE}"
        token = credential("azure_ad_token", None)
        if token is not None:
            provider["azure_ad_token"] = token
        else:
            provider["api_key"] = credential("api_key", family.key_env)
        version = take("api_version")
        # YAML reads an unquoted 2024-10-21 as a date: the version is its text
        provider["api_version"] = (
            str(version) if version is not None else "${AZURE_API_VERSION:-2024-10-21}"
        )
    elif family.type == "anthropic":
        if api_base is not None:
            provider["base_url"] = str(api_base).removesuffix("/").removesuffix("/v1/messages")
        provider["api_key"] = credential("api_key", family.key_env)
    elif family.type == "gemini":
        if api_base is not None:
            base = str(api_base).rstrip("/")
            provider["base_url"] = base if "/v1" in base else f"{base}/v1beta"
        provider["api_key"] = credential("api_key", family.key_env)
    else:
        _bedrock(provider, params, used, path, result)
    timeouts = _timeouts(take("timeout"), take("stream_timeout"), clocks)
    if timeouts:
        provider["timeouts"] = timeouts
    return provider, used


def _openai_base(api_base: Any, family: Family) -> Any:
    """LiteLLM's Ollama base is the server root (it calls Ollama's own API); Crossway calls its
    OpenAI-compatible ``/v1``."""
    base = str(api_base).rstrip("/")
    if family.preset == "ollama" and not base.endswith("/v1"):
        return f"{base}/v1"
    return base


_BEDROCK_FIELDS = {
    "aws_region_name": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "aws_bedrock_runtime_endpoint": "endpoint_url",
    "api_base": "endpoint_url",
}
_BEDROCK_UNSUPPORTED: tuple[str, ...] = ("aws_profile_name", "aws_role_name", "aws_session_name")
_BEDROCK_UNSUPPORTED += ("aws_web_identity_token", "aws_sts_endpoint", "aws_external_id")


def _bedrock(
    provider: dict[str, Any], params: dict[str, Any], used: set[str], path: str, result: Translation
) -> None:
    """Bedrock's fields; without them Crossway reads the standard ``AWS_*`` variables at load,
    as LiteLLM does."""
    for source, field in _BEDROCK_FIELDS.items():
        if source in params:
            used.add(source)
            provider[field] = env_value(params[source])
    for source in _BEDROCK_UNSUPPORTED:
        if source in params:
            used.add(source)
            result.skip(
                f"{path}.{source}",
                "Crossway signs with an access key (fields or AWS_* variables): no profiles, "
                "role assumption or web identity",
            )


def _timeouts(timeout: Any, stream_timeout: Any, clocks: Clocks) -> dict[str, Any]:
    timeout = clocks.timeout if timeout is None else timeout
    stream_timeout = clocks.stream_timeout if stream_timeout is None else stream_timeout
    timeouts: dict[str, Any] = {}
    if timeout is not None:
        timeouts["total"] = timeout
        if isinstance(timeout, int | float) and timeout < 120:
            timeouts["first_byte"] = timeout
    if stream_timeout is not None:
        timeouts["idle"] = stream_timeout
    return timeouts


def _prices(source: dict[str, Any], path: str, result: Translation) -> dict[str, float] | None:
    """Per-token costs → per-million prices (six decimals, as Crossway keeps them)."""
    given = {field: source[name] for name, field in _PRICE_FIELDS.items() if name in source}
    if not given:
        return None
    if "input" not in given or "output" not in given:
        result.skip(
            f"{path}.model_info",
            "a price needs both input_cost_per_token and output_cost_per_token: the catalog "
            "price applies",
        )
        return None
    prices: dict[str, float] = {}
    for field, value in given.items():
        try:
            per_million = Decimal(str(env_value(value))) * _MILLION
        except ArithmeticError:
            result.skip(f"{path}.model_info", f"{field} cost {value!r} is not a number")
            return None
        rounded = per_million.quantize(_SIX_PLACES)
        if rounded != per_million:
            result.notes.append(f"{path}: {field} price rounded to six decimals per million")
        prices[field] = float(rounded)
    return prices
