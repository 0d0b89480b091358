"""The gateway's YAML configuration: shape, environment expansion, validation.

Loading is two-stage. :func:`load_config` reads YAML, expands ``${VAR}`` / ``${VAR:-default}``
in string values, and decodes every section into frozen msgspec Structs that forbid unknown keys;
it then checks what types cannot express (a deployment naming an unknown provider). It reports
*every* error it finds, each with its path (``$.providers.openai.timeouts.connect``), by raising
:class:`ConfigError`. Expanded values are never echoed in errors: they may be secrets.
Building the runtime from a valid config (providers, plugins) is :mod:`proxy.runtime.snapshot`'s
job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import yaml
from msgspec import Meta, Struct

from proxy.core.redact import Redactor
from proxy.governance.auth.config import (
    DEFAULT_DATABASE_URL,
    AuthConfig,
    DatabaseConfig,
    TeamConfig,
    check_auth,
)
from proxy.governance.price_catalog import (
    PricingConfig,
    PricingError,
    parse_price,
    price_of,
)
from proxy.governance.pricing import ModelPrice
from proxy.guardrails.config import CheckConfig, parse_checks
from proxy.mcp.config import McpConfig, check_mcp
from proxy.providers import PROVIDER_TYPES
from proxy.providers.base import ProviderConfig
from proxy.request_logs.config import RequestLogsConfig
from proxy.state.config import StateConfig
from proxy.tracing.config import TracesConfig
from proxy.upstream.router import DeploymentConfig

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MSGSPEC_PATH = re.compile(r"`\$([^`]*)`")

_T = TypeVar("_T")

Port = Annotated[int, Meta(ge=0, le=65535)]
PositiveSeconds = Annotated[float, Meta(gt=0)]


class CorsConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Cross-origin access for browser clients (see :mod:`proxy.http.edges`).

    ``allow_origins`` are exact origins (``https://app.example.com``) or ``"*"`` for any.
    ``allow_headers`` are the request headers a browser may send (``["*"]``: whatever the
    preflight asks for). ``expose_headers`` are the response headers scripts may read.
    ``allow_credentials`` lets browsers send cookies and HTTP auth (the origin is then echoed,
    never ``*``). ``max_age`` is how long, in seconds, a browser may cache a preflight answer.
    """

    allow_origins: Annotated[tuple[str, ...], Meta(min_length=1)]
    allow_headers: tuple[str, ...] = ("*",)
    expose_headers: tuple[str, ...] = (
        "x-request-id",
        "x-crossway-provider",
        "x-crossway-model",
        "x-crossway-attempts",
        "x-crossway-fallback",
        "x-crossway-trace-id",
        "x-crossway-cost-usd",
        "x-crossway-overhead-ms",
        "x-crossway-guardrails",
        "retry-after",
    )
    allow_credentials: bool = False
    max_age: Annotated[int, Meta(ge=0)] = 600


class ServerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """How the gateway listens, and its per-request limits.

    ``max_body_bytes`` larger bodies get 413. ``body_read_timeout`` seconds to receive a request
    body (a slow client gets 408). ``client_idle_timeout`` seconds a client connection may go
    without a whole request head: idle between keep-alive requests, or trickling a head (a
    slow-header client is disconnected). ``shutdown_timeout`` seconds in-flight requests get to
    finish on SIGTERM; those still running then end with 503 ``server_shutting_down``, in-band
    in a stream (:mod:`proxy.http.drain`). ``access_log`` one JSON line per request on stdout.
    ``cors`` lets browser pages of the listed origins call the gateway (off when absent).
    ``require_auth_for_metrics`` makes ``/metrics`` demand the master key (Bearer).
    ``allow_weaker_reload`` lets a reload swap in a config weaker than this one (one that demands
    no key, or has no master key, an open ``/metrics``, no providers or no model aliases where
    this one has them); it is read from the config that serves, never from the file being
    loaded, so that a truncated file cannot grant it (see
    :func:`proxy.runtime.snapshot.weakenings`).
    """

    host: str = "127.0.0.1"
    port: Port = 4000
    workers: Annotated[int, Meta(ge=1, le=256)] = 1
    max_body_bytes: Annotated[int, Meta(ge=1024)] = 10 * 1024 * 1024
    body_read_timeout: PositiveSeconds = 30.0
    client_idle_timeout: PositiveSeconds = 60.0
    shutdown_timeout: PositiveSeconds = 30.0
    access_log: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    cors: CorsConfig | None = None
    require_auth_for_metrics: bool = False
    allow_weaker_reload: bool = False


class MetricsConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Prometheus export. ``max_model_labels`` bounds the distinct ``model`` label values; past
    it, further models are counted under ``other`` so a client cannot explode cardinality."""

    max_model_labels: Annotated[int, Meta(ge=1)] = 200


class ResponsesConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Stored Responses-API responses (``store: true``): kept ``ttl`` seconds (30 days), at most
    ``max_entries`` of them and ``max_bytes`` in all, and at most ``max_entries_per_owner``
    and ``max_bytes_per_owner`` of one key (a tenth of the store's entries, an eighth of its
    bytes), so that one key cannot push another's out (eviction:
    :mod:`proxy.stored.response_store`). ``store`` says where: ``database`` (the gateway's database:
    durable, shared by workers and instances), ``memory`` (per process, lost on restart), or
    ``auto``: the database when the gateway uses it anyway (the ``auth`` plugin is on, or a master
    key is set), else memory."""

    store: Literal["auto", "memory", "database"] = "auto"
    ttl: PositiveSeconds = 30 * 24 * 3600.0
    max_entries: Annotated[int, Meta(ge=1)] = 10_000
    max_bytes: Annotated[int, Meta(ge=1024)] = 64 * 1024 * 1024
    max_entries_per_owner: Annotated[int, Meta(ge=1)] = 1_000
    max_bytes_per_owner: Annotated[int, Meta(ge=1024)] = 8 * 1024 * 1024


class S3Config(Struct, frozen=True, forbid_unknown_fields=True):
    """Where ``batches.storage: s3`` keeps file contents: objects ``{prefix}{file id}`` in
    ``bucket``, at ``endpoint_url`` (absent: AWS S3 in ``region``). Without
    ``access_key_id`` and ``secret_access_key`` (both or neither) the AWS SDK's own chain finds
    credentials (environment, profile, instance role)."""

    bucket: str
    prefix: str = "crossway/files/"
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None

    def __post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both access_key_id and secret_access_key, or neither")


class BatchesConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Files and batches (``/v1/files``, ``/v1/batches``; :mod:`proxy.batches`, as the process
    started). ``storage`` is where file contents go: ``database`` (the gateway's database, in
    parts) or ``directory`` (files under ``directory``, which it then names). An upload past
    ``max_file_bytes`` (200 MB, OpenAI's bound on a batch input file) is refused with 413; a
    batch holds at most ``max_lines`` requests. Each process runs a batch's lines
    ``concurrency`` at a time, at most ``rate`` a second (None: as fast as they end), and looks
    for batches to run (new ones, or those a stopped process left) every ``poll_interval``
    seconds. An ended batch, its lines and the files it made are deleted ``retention_days``
    after it ended (None: kept until deleted; :mod:`proxy.batches.retention`)."""

    storage: Literal["database", "directory", "s3"] = "database"
    directory: str | None = None
    s3: S3Config | None = None
    max_file_bytes: Annotated[int, Meta(ge=1)] = 200 * 1024 * 1024
    max_lines: Annotated[int, Meta(ge=1)] = 50_000
    concurrency: Annotated[int, Meta(ge=1, le=1024)] = 16
    rate: Annotated[float, Meta(gt=0)] | None = None
    poll_interval: PositiveSeconds = 2.0
    retention_days: Annotated[float, Meta(gt=0)] | None = 30.0

    def __post_init__(self) -> None:
        if self.storage == "directory" and not self.directory:
            raise ValueError("storage: directory needs a directory")
        if self.storage == "s3" and self.s3 is None:
            raise ValueError("storage: s3 needs an s3 section (its bucket at least)")


class CompatConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Compatibility layers for clients of other gateways. ``litellm``: LiteLLM's routes
    (``/key/*``, ``/spend/logs``, ``/model/info``, ``/health/liveliness``,
    ``/health/readiness``; as the process started, :mod:`proxy.admin.litellm.routes`) and response
    headers (``x-litellm-*``; following reloads, :mod:`proxy.http.compat_headers`)."""

    litellm: bool = True


class MediaConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The media routes (audio, images, moderations, rerank; ``docs/media.md``):
    ``max_upload_bytes`` bounds a multipart upload (transcriptions, translations, image
    edits), read part by part and refused with 413 as soon as it passes the bound (25 MiB,
    OpenAI's audio limit, by default)."""

    max_upload_bytes: Annotated[int, Meta(ge=1024)] = 25 * 1024 * 1024


class TelemetryConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The ``telemetry`` section: ``traces``, OpenTelemetry spans over OTLP
    (:mod:`proxy.tracing.config`; absent, tracing is off), and ``request_logs``, what is kept
    of each request (:mod:`proxy.request_logs.config`)."""

    traces: TracesConfig | None = None
    request_logs: RequestLogsConfig = RequestLogsConfig()


class PluginSpec(Struct, frozen=True):
    """A plugin entry as written: a built-in name or ``module:Class``, its options, its path.

    ``environment`` holds the values the config took from the environment (they may be secrets),
    so that errors about this entry can be redacted as config errors are.
    """

    ref: str
    options: dict[str, Any]
    path: str
    environment: tuple[str, ...] = ()


class GatewayConfig(Struct, frozen=True):
    """The whole, validated configuration.

    ``provider_prices`` holds each provider's ``prices`` section (by model name, ``"*"`` for
    any other) and ``deployment_prices`` the deployments' own prices by target; both validated.
    """

    server: ServerConfig = ServerConfig()
    metrics: MetricsConfig = MetricsConfig()
    responses: ResponsesConfig = ResponsesConfig()
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)
    models: dict[str, tuple[DeploymentConfig, ...]] = msgspec.field(default_factory=dict)
    plugins: tuple[PluginSpec, ...] = ()
    pricing: PricingConfig = PricingConfig()
    provider_prices: dict[str, dict[str, ModelPrice]] = msgspec.field(default_factory=dict)
    deployment_prices: dict[str, ModelPrice] = msgspec.field(default_factory=dict)
    database: DatabaseConfig = DatabaseConfig()
    auth: AuthConfig = AuthConfig()
    state: StateConfig = StateConfig()
    compat: CompatConfig = CompatConfig()
    batches: BatchesConfig = BatchesConfig()
    media: MediaConfig = MediaConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    guardrails: dict[str, CheckConfig] = msgspec.field(default_factory=dict)
    mcp: McpConfig = McpConfig()


class ConfigError(Exception):
    """The configuration is invalid; ``errors`` lists every problem, each with its path.

    ``plugins`` holds the plugin entries that did parse, so that a caller can validate them too
    and report every error of a file at once.
    """

    def __init__(self, errors: list[str], plugins: tuple[PluginSpec, ...] = ()) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {e}" for e in errors))
        self.errors = errors
        self.plugins = plugins


_TOP_LEVEL = frozenset(
    {
        "server",
        "metrics",
        "responses",
        "providers",
        "models",
        "plugins",
        "pricing",
        "database",
        "mcp",
        "auth",
        "state",
        "compat",
        "batches",
        "media",
        "telemetry",
        "guardrails",
    }
)


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, expand and validate the YAML file at ``path``. Raises :class:`ConfigError`, also
    for a file that holds no YAML document (empty, or only comments): that is what an
    interrupted or truncated write leaves, never a config."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    return parse_config(text, environ, empty=False)


def parse_config(
    text: str, environ: Mapping[str, str] | None = None, *, empty: bool = True
) -> GatewayConfig:
    """Validate YAML ``text`` as a gateway config. Raises :class:`ConfigError`. A text with no
    YAML document is the default config when ``empty``, else an error."""
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"]) from None
    if tree is None:
        if not empty:
            raise ConfigError(["$: the config is empty (no YAML document)"])
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError(["$: the config must be a mapping"])
    errors: list[str] = []
    substituted: list[str] = []
    database_node = tree.get("database")
    if isinstance(database_node, dict | None) and not (database_node or {}).get("url"):
        tree = {**tree, "database": {**(database_node or {}), "url": DEFAULT_DATABASE_URL}}
    tree = _expand(tree, "$", os.environ if environ is None else environ, errors, substituted)
    for key in tree:
        if key not in _TOP_LEVEL:
            errors.append(f"$.{key}: unknown key (expected one of {', '.join(sorted(_TOP_LEVEL))})")
    server = _convert(tree.get("server", {}), ServerConfig, "$.server", errors)
    metrics = _convert(tree.get("metrics", {}), MetricsConfig, "$.metrics", errors)
    responses = _convert(tree.get("responses", {}), ResponsesConfig, "$.responses", errors)
    pricing = _convert(tree.get("pricing", {}), PricingConfig, "$.pricing", errors)
    provider_prices: dict[str, dict[str, ModelPrice]] = {}
    providers = _providers(tree.get("providers", {}), errors, provider_prices)
    deployment_prices: dict[str, ModelPrice] = {}
    models = _models(tree.get("models", {}), providers, errors, deployment_prices)
    plugins = _plugins(tree.get("plugins", []), errors, tuple(substituted))
    database = _convert(tree.get("database"), DatabaseConfig, "$.database", errors)
    auth = _auth(tree.get("auth"), errors)
    state = _convert(tree.get("state", {}), StateConfig, "$.state", errors)
    compat = _convert(tree.get("compat", {}), CompatConfig, "$.compat", errors)
    batches = _convert(tree.get("batches", {}), BatchesConfig, "$.batches", errors)
    media = _convert(tree.get("media", {}), MediaConfig, "$.media", errors)
    telemetry = _convert(tree.get("telemetry", {}), TelemetryConfig, "$.telemetry", errors)
    guardrails = parse_checks(tree.get("guardrails"), "$.guardrails", errors)
    mcp = _convert(tree.get("mcp", {}), McpConfig, "$.mcp", errors)
    if mcp is not None:
        check_mcp(mcp, errors)
    if (
        errors
        or server is None
        or metrics is None
        or responses is None
        or pricing is None
        or database is None
        or auth is None
        or state is None
        or compat is None
        or batches is None
        or media is None
        or telemetry is None
        or mcp is None
    ):
        # An error may quote a value; values that came from the environment may be secrets.
        redactor = Redactor(substituted)
        raise ConfigError([redactor.text(error) for error in errors], plugins)
    return GatewayConfig(
        server=server,
        metrics=metrics,
        responses=responses,
        providers=providers,
        models=models,
        plugins=plugins,
        pricing=pricing,
        provider_prices=provider_prices,
        deployment_prices=deployment_prices,
        database=database,
        auth=auth,
        state=state,
        compat=compat,
        batches=batches,
        media=media,
        telemetry=telemetry,
        guardrails=guardrails,
        mcp=mcp,
    )


def _expand(
    node: Any, path: str, environ: Mapping[str, str], errors: list[str], substituted: list[str]
) -> Any:
    """Expand environment references in every string value below ``node``.

    Every value taken from the environment is recorded in ``substituted`` (to be redacted).
    """
    if isinstance(node, str):
        if "${" not in node:
            return node

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            value = environ.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    errors.append(f"{path}: environment variable {name} is not set")
                    return ""
                return default
            substituted.append(value)
            return value

        return _ENV_REF.sub(substitute, node)
    if isinstance(node, dict):
        return {
            key: _expand(value, f"{path}.{key}", environ, errors, substituted)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [
            _expand(value, f"{path}[{i}]", environ, errors, substituted)
            for i, value in enumerate(node)
        ]
    return node


def _convert(node: Any, target: type[_T], path: str, errors: list[str]) -> _T | None:
    """Decode ``node`` as ``target``; on failure record the error at its full path, give None."""
    try:
        return msgspec.convert(node, target, strict=False)
    except msgspec.ValidationError as exc:
        errors.append(_with_path(str(exc), path))
        return None


def _with_path(message: str, prefix: str) -> str:
    """Rewrite msgspec's ``... - at `$.x` `` into ``$prefix.x: ...``."""
    match = _MSGSPEC_PATH.search(message)
    if match is None:
        return f"{prefix}: {message}"
    detail = message[: match.start()].removesuffix(" - at ").strip()
    return f"{prefix}{match.group(1)}: {detail}"


def _mapping(node: Any, path: str, errors: list[str]) -> dict[str, Any]:
    if node is None:
        return {}
    if not isinstance(node, dict):
        errors.append(f"{path}: expected a mapping")
        return {}
    return node


def _providers(
    node: Any, errors: list[str], prices: dict[str, dict[str, ModelPrice]]
) -> dict[str, ProviderConfig]:
    """Every provider, and into ``prices`` each one's ``prices`` section (which is the
    gateway's, not the provider's: it is taken out before the provider's own fields)."""
    providers: dict[str, ProviderConfig] = {}
    types = ", ".join(PROVIDER_TYPES)
    for name, spec in _mapping(node, "$.providers", errors).items():
        path = f"$.providers.{name}"
        if not isinstance(name, str) or not name or "/" in name:
            errors.append(f"{path}: a provider name must be a non-empty string without '/'")
            continue
        if not isinstance(spec, dict) or spec.get("type") not in PROVIDER_TYPES:
            errors.append(f"{path}.type: expected one of {types}")
            continue
        if "prices" in spec:
            spec = dict(spec)
            prices[name] = _price_table(spec.pop("prices"), f"{path}.prices", errors)
        config_type = PROVIDER_TYPES[spec["type"]].config
        config = _convert(spec, config_type, path, errors)
        if config is not None:
            providers[name] = config
    return providers


def _price_table(node: Any, path: str, errors: list[str]) -> dict[str, ModelPrice]:
    table: dict[str, ModelPrice] = {}
    for model, spec in _mapping(node, path, errors).items():
        try:
            table[str(model)] = parse_price(spec, f"{path}.{model}")
        except PricingError as exc:
            errors.append(str(exc))
    return table


def _models(
    node: Any,
    providers: Mapping[str, ProviderConfig],
    errors: list[str],
    prices: dict[str, ModelPrice],
) -> dict[str, tuple[DeploymentConfig, ...]]:
    """Every alias, and into ``prices`` the deployments' own prices by target (a target priced
    differently by two deployments is an error: a reply names its target, not its alias)."""
    models: dict[str, tuple[DeploymentConfig, ...]] = {}
    priced_at: dict[str, str] = {}
    for alias, deployments in _mapping(node, "$.models", errors).items():
        path = f"$.models.{alias}"
        if isinstance(deployments, dict):
            deployments = [deployments]
        if not isinstance(deployments, list) or not deployments:
            errors.append(f"{path}: expected a non-empty list of deployments")
            continue
        converted = []
        for i, deployment in enumerate(deployments):
            item = _convert(deployment, DeploymentConfig, f"{path}[{i}]", errors)
            if item is None:
                continue
            provider, _, model = item.target.partition("/")
            if not model:
                errors.append(f"{path}[{i}].target: expected 'provider/model'")
            elif provider not in providers:
                errors.append(f"{path}[{i}].target: unknown provider {provider!r}")
            if item.prices is not None:
                _deployment_price(item, f"{path}[{i}].prices", prices, priced_at, errors)
            converted.append(item)
        models[str(alias)] = tuple(converted)
    return models


def _deployment_price(
    item: DeploymentConfig,
    path: str,
    prices: dict[str, ModelPrice],
    priced_at: dict[str, str],
    errors: list[str],
) -> None:
    assert item.prices is not None
    try:
        price = price_of(item.prices, path)
    except PricingError as exc:
        errors.append(str(exc))
        return
    known = prices.get(item.target)
    if known is not None and known != price:
        errors.append(f"{path}: {item.target} is priced differently at {priced_at[item.target]}")
        return
    prices[item.target] = price
    priced_at[item.target] = path


def _auth(node: Any, errors: list[str]) -> AuthConfig | None:
    node = _mapping(node, "$.auth", errors)
    teams = _mapping(node.get("teams"), "$.auth.teams", errors)
    failed = False
    for team_id, team in teams.items():  # one by one: an error's path names the team
        failed |= _convert(team, TeamConfig, f"$.auth.teams.{team_id}", errors) is None
    auth = None if failed else _convert(node, AuthConfig, "$.auth", errors)
    if auth is not None:
        check_auth(auth, errors)
    return auth


def _plugins(node: Any, errors: list[str], environment: tuple[str, ...]) -> tuple[PluginSpec, ...]:
    if node is None:
        return ()
    if not isinstance(node, list):
        errors.append("$.plugins: expected a list")
        return ()
    specs = _plugin_entries(node, errors)
    if not environment:
        return tuple(specs)
    return tuple(msgspec.structs.replace(spec, environment=environment) for spec in specs)


def _plugin_entries(node: list[Any], errors: list[str]) -> Iterator[PluginSpec]:
    for i, entry in enumerate(node):
        path = f"$.plugins[{i}]"
        if isinstance(entry, str):
            yield PluginSpec(ref=entry, options={}, path=path)
        elif isinstance(entry, dict) and "plugin" in entry:
            extra = set(entry) - {"plugin", "options"}
            if extra:
                errors.append(f"{path}: unknown key {sorted(extra)[0]!r}")
            options = entry.get("options") or {}
            if not isinstance(entry["plugin"], str) or not isinstance(options, dict):
                errors.append(f"{path}: expected {{plugin: 'module:Class', options: {{...}}}}")
                continue
            yield PluginSpec(ref=entry["plugin"], options=options, path=f"{path}.options")
        elif isinstance(entry, dict) and len(entry) == 1:
            ((name, options),) = entry.items()
            if options is None:
                options = {}
            if not isinstance(options, dict):
                errors.append(f"{path}.{name}: expected a mapping of options")
                continue
            yield PluginSpec(ref=str(name), options=options, path=f"{path}.{name}")
        else:
            errors.append(f"{path}: expected a built-in name, {{name: options}} or {{plugin: ...}}")
