"""How each benchmarked server is launched, configured and addressed.

Three servers take part: the mock upstream (also the "direct" baseline), the minimal
passthrough and the Crossway gateway. All listen on 127.0.0.1 only.
"""

import shlex
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.processes import free_port, spawn, wait_ready
from bench.redis_stats import CommandCounter

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parent.parent
CHAT_PATH = "/v1/chat/completions"
DEFAULT_GATEWAY_CMD = (
    "{python} -m proxy serve --config {config} --host 127.0.0.1 --port {port} --workers 1"
)
_READY_TIMEOUT_S = 20.0

# Opt-in gateway targets: the same gateway with something turned on, each measured against
# ``gateway`` (the empty chain) in the same interleaved rounds. Name -> what it adds.
GATEWAY_VARIANTS = {
    "gateway-default": "the shipped config's access log and plugin chain",
    "gateway-cost": "the cost plugin (pricing every reply) in front of the empty chain",
    "gateway-masking": "the masking plugin (every built-in entity) in front of the empty chain",
    "gateway-guardrails": "the guardrails plugin (secrets and keywords on input and output) in "
    "front of the empty chain",
    "gateway-auth": "the auth and limits plugins (a key with key and team limits in every request)",
    "gateway-keyed": "the auth plugin alone (a key with key and team budgets in every request)",
    "gateway-budget": "auth then the cost plugin (the key's and its team's budgets reserved and "
    "settled on every request, every request in the ledger)",
    "gateway-cache": "the response cache (memory backend): repeated requests are hits",
    "gateway-cache-miss": "the response cache storing and sharing nothing: every request misses",
    "gateway-gov": "the governance chain (auth, limits, cost, a cache miss, fallback, retry, "
    "balance) on the in-process state store",
    "gateway-gov-redis": "the governance chain on a private redis-server (state.backend: redis)",
    "gateway-traced": "tracing on (every request sampled, spans exported over OTLP/HTTP to the "
    "mock upstream's sink) in front of the empty chain",
    "gateway-logs-metadata": "request logs keeping every request's metadata (empty chain)",
    "gateway-logs-payloads": "request logs keeping every request's payloads (empty chain)",
}
# Targets whose every request carries AUTH_KEY.
KEYED_VARIANTS = (
    "gateway-auth",
    "gateway-keyed",
    "gateway-budget",
    "gateway-gov",
    "gateway-gov-redis",
)
_CACHE_OPTIONS = {
    "gateway-cache": "{}",
    "gateway-cache-miss": "{max_entry_bytes: 1, coalesce: false}",
}
# The key every gateway-auth request carries: declared in its config, with limits far above
# what a run sends, so every request is admitted and every limit is counted.
AUTH_KEY = "sk-cw-bench-" + "0123456789abcdef" * 3
_AUTH_HEADERS = (("Authorization", f"Bearer {AUTH_KEY}"),)

# The plugin chain of the HTTP benchmark's gateway-masking target: every built-in entity.
MASKING_PLUGINS = (
    "plugins:\n"
    "  - masking:\n"
    "      entities: {email: mask, phone: mask, credit_card: block, iban: mask, us_ssn: redact,\n"
    "                 ip_address: redact, secret: block}\n"
)


# The config of the gateway-guardrails target: the benchmark checks.
GUARDRAILS_CONFIG = (
    "guardrails:\n"
    "  no-secrets: {type: secrets, on: both}\n"
    "  competitors: {type: keywords, words: [acme, globex, initech], on: both}\n"
    "plugins:\n"
    "  - guardrails: {default: [no-secrets, competitors]}\n"
)


@dataclass(frozen=True)
class Server:
    """A running server: its root PID, port and chat-completions URL, the headers every
    request to it must carry (the keyed targets' key) and its Redis, if any."""

    pid: int
    port: int
    headers: tuple[tuple[str, str], ...] = ()
    redis: CommandCounter | None = None
    """The relay to the redis-server it keeps its state in, counting the commands it sends."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    @property
    def chat_url(self) -> str:
        """The URL load is sent to."""
        return self.base_url + CHAT_PATH


def gateway_config_yaml(
    port: int,
    upstream_port: int,
    *,
    variant: str | None = None,
    database: Path | None = None,
    redis_url: str | None = None,
) -> str:
    """Return the gateway config: one worker, one OpenAI provider.

    By default no access log and no plugins (the ``gateway`` target). ``variant`` names one of
    :data:`GATEWAY_VARIANTS`: ``gateway-default`` is what
    ``config/gateway.yaml`` turns on — the access log and the chain headers, fallback, retry,
    balance, with the same options; ``gateway-cost`` adds the ``cost`` plugin, with a price
    for every model of the provider and its ledger in the database at ``database``;
    ``gateway-masking`` the ``masking`` plugin on every
    built-in entity (:data:`MASKING_PLUGINS`); ``gateway-auth`` puts ``auth`` and ``limits`` in
    front of the empty chain, with :data:`AUTH_KEY` declared in a team, both with rpm, tpm and
    max_parallel limits, and its database at ``database``; ``gateway-budget`` puts ``auth`` and
    ``cost`` there instead, with :data:`AUTH_KEY` and its team each given a budget far above what
    a run spends (:data:`_BUDGETS`), every model priced and the ledger in ``database``, and
    ``gateway-keyed`` is the same without ``cost`` (its baseline: ``gateway-budget`` less
    ``gateway-keyed`` is what budgets and the ledger cost a served request); ``gateway-cache``
    adds the ``cache``
    plugin on its defaults, and ``gateway-cache-miss`` the ``cache`` plugin with
    ``max_entry_bytes: 1, coalesce: false``, so that nothing is stored or shared and every
    request does all of a miss's work (lookup, the stream tee, the answer folded, encoded and
    refused); ``gateway-logs-metadata`` / ``gateway-logs-payloads`` keep every request's
    metadata / payloads in the request logs (database at ``database``) on the empty chain;
    ``gateway-gov`` is issue 16's governance chain (:func:`_governance`) on the
    in-process state store, ``gateway-gov-redis`` the same with ``state.backend: redis`` at
    ``redis_url``; ``gateway-traced`` is the empty chain with ``telemetry.traces`` on, every
    request sampled and its spans exported to the mock upstream's OTLP sink. This is the single
    place to adjust if the gateway's config schema changes.
    """
    access_log = str(variant == "gateway-default").lower()
    server = f"server: {{host: {HOST}, port: {port}, workers: 1, access_log: {access_log}}}\n"
    provider = (
        "providers:\n"
        f'  upstream: {{type: openai, base_url: "http://{HOST}:{upstream_port}/v1",'
        ' api_key: "bench-key"}\n'
    )
    if variant is None:
        return server + provider + "plugins: []\n"
    if variant == "gateway-auth":
        return (
            server
            + provider
            + f'database: {{url: "sqlite:///{database}"}}\n'
            + _AUTH
            + "plugins:\n  - auth: {}\n  - limits: {}\n"
        )
    if variant in ("gateway-keyed", "gateway-budget"):
        return (
            server
            + _priced(provider)  # in both, so that they differ by the plugin alone
            + f'database: {{url: "sqlite:///{database}"}}\n'
            + _BUDGETS
            + "plugins:\n  - auth: {}\n"
            + ("  - cost: {}\n" if variant == "gateway-budget" else "")
        )
    if variant in ("gateway-gov", "gateway-gov-redis"):
        if variant == "gateway-gov-redis" and redis_url is None:
            raise ValueError("gateway-gov-redis needs a redis_url")
        return _governance(server, provider, database, redis_url)
    if variant in _CACHE_OPTIONS:
        return server + provider + f"plugins:\n  - cache: {_CACHE_OPTIONS[variant]}\n"
    if variant == "gateway-cost":
        priced = _priced(provider)
        where = database or Path("data") / "crossway.db"
        return (
            server
            + f'database: {{url: "sqlite:///{where}"}}\n'
            + priced
            + "plugins:\n  - cost: {}\n"
        )
    if variant == "gateway-masking":
        return server + provider + MASKING_PLUGINS
    if variant == "gateway-traced":
        return (
            server
            + provider
            + f'telemetry: {{traces: {{endpoint: "http://{HOST}:{upstream_port}"}}}}\n'
            + "plugins: []\n"
        )
    if variant in ("gateway-logs-metadata", "gateway-logs-payloads"):
        store = variant.removeprefix("gateway-logs-")
        where = database or Path("data") / "crossway.db"
        return (
            server
            + provider
            + f'database: {{url: "sqlite:///{where}"}}\n'
            + f"telemetry: {{request_logs: {{store: {store}}}}}\n"
            + "plugins: []\n"
        )
    if variant == "gateway-guardrails":
        return server + provider + GUARDRAILS_CONFIG
    if variant != "gateway-default":
        raise ValueError(f"unknown gateway variant {variant!r}")
    return (
        server + provider + "models: {fast: [{target: upstream/bench-model}]}\n"
        "plugins:\n"
        "  - headers: {forward: [x-trace-id]}\n"
        "  - fallback: {chains: {upstream/bench-model: [fast]}}\n"
        "  - retry: {retries: 2}\n"
        "  - balance: {strategy: weighted}\n"
    )


def _auth_section(settings: str) -> str:
    """The ``auth`` section declaring :data:`AUTH_KEY` in the team ``bench``, the key and the
    team each with ``settings`` (YAML flow mapping entries)."""
    return (
        "auth:\n"
        f"  teams: {{bench: {{{settings}}}}}\n"
        f'  keys: [{{key: "{AUTH_KEY}", alias: bench, team: bench, {settings}}}]\n'
    )


_AUTH = _auth_section("rpm: 100000000, tpm: 100000000000, max_parallel: 100000")
_BUDGETS = _auth_section("budget: {max_usd: 1000000, period: 1mo}")


def _priced(provider: str) -> str:
    """``provider`` (the providers section) with a price for every model."""
    return provider.replace("}\n", ', prices: {"*": {input: 1, output: 2}}}\n')


def _governance(server: str, provider: str, database: Path | None, redis_url: str | None) -> str:
    """Issue 16's governance chain: auth → limits (key and team: rpm, tpm, max_parallel) →
    cost (every model priced, the ledger in ``database``) → cache (in the state store, storing
    nothing: every request a miss) → fallback → retry → balance; its state in the Redis at
    ``redis_url`` when given (generous timeout: the bench measures cost, not outages)."""
    priced = _priced(provider)
    state = (
        f'state: {{backend: redis, redis: {{url: "{redis_url}", timeout_ms: 2000}}}}\n'
        if redis_url is not None
        else ""
    )
    return (
        server
        + priced
        + f'database: {{url: "sqlite:///{database}"}}\n'
        + "models: {fast: [{target: upstream/bench-model}]}\n"
        + state
        + _AUTH
        + "plugins:\n"
        "  - auth: {}\n"
        "  - limits: {}\n"
        "  - cost: {}\n"
        "  - cache: {backend: store, max_entry_bytes: 1, coalesce: false}\n"
        "  - fallback: {chains: {upstream/bench-model: [fast]}}\n"
        "  - retry: {retries: 2}\n"
        "  - balance: {strategy: weighted}\n"
    )


async def start_upstream(stack: ExitStack, log_dir: Path) -> Server:
    """Start the mock upstream (latency 0 ms) and wait until it answers."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.upstream", "--host", HOST, "--port", str(port)]
    child = spawn(stack, "upstream", argv, REPO_ROOT, log_dir)
    await wait_ready(child, f"http://{HOST}:{port}/health", _READY_TIMEOUT_S)
    return Server(pid=child.pid, port=port)


async def start_passthrough(stack: ExitStack, log_dir: Path, upstream: Server) -> Server:
    """Start the minimal passthrough in front of ``upstream`` and wait until it answers."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.passthrough",
        "--host",
        HOST,
        "--port",
        str(port),
        "--upstream",
        upstream.base_url,
    ]
    child = spawn(stack, "passthrough", argv, REPO_ROOT, log_dir)
    await wait_ready(child, f"http://{HOST}:{port}/health", _READY_TIMEOUT_S)
    return Server(pid=child.pid, port=port)


async def start_gateway(
    stack: ExitStack,
    log_dir: Path,
    upstream: Server,
    command_template: str,
    *,
    name: str = "gateway",
    variant: str | None = None,
    redis: CommandCounter | None = None,
) -> Server:
    """Start the gateway with :func:`gateway_config_yaml` and wait for ``/health/ready``.

    ``command_template`` is split like a shell command line; ``{python}``, ``{config}``
    and ``{port}`` in it are replaced by the interpreter, config file path and port. ``name``
    names its config and log files; ``variant`` is passed to :func:`gateway_config_yaml`, with
    Redis through the ``redis`` relay when given.
    """
    port = free_port()
    config_path = log_dir / f"{name}.yaml"
    database = log_dir / f"{name}.db"
    redis_url = None if redis is None else f"redis://{HOST}:{redis.port}/0"
    config_path.write_text(
        gateway_config_yaml(
            port, upstream.port, variant=variant, database=database, redis_url=redis_url
        )
    )
    values = {"python": sys.executable, "config": str(config_path), "port": str(port)}
    argv = [token.format(**values) for token in shlex.split(command_template)]
    child = spawn(stack, name, argv, REPO_ROOT, log_dir)
    await wait_ready(child, f"http://{HOST}:{port}/health/ready", _READY_TIMEOUT_S)
    headers = _AUTH_HEADERS if variant in KEYED_VARIANTS else ()
    return Server(pid=child.pid, port=port, headers=headers, redis=redis)


async def set_upstream_latency(
    session: aiohttp.ClientSession, upstream: Server, latency_ms: int
) -> None:
    """Set the mock upstream's artificial latency before the first byte."""
    url = f"{upstream.base_url}/bench/latency"
    async with session.post(url, params={"ms": str(latency_ms)}) as response:
        response.raise_for_status()
