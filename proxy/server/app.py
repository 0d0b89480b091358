"""The aiohttp application's assembly: :func:`create_app` builds it from a config file.

It opens what the process shares (database, shared state, spend ledger, metrics), loads the config
into a snapshot and swaps it on SIGHUP (:func:`reload_runtime`), routes every dialect's paths to the
request pipeline (:mod:`proxy.http.dialect_route`), and adds the other routes: models, metrics and
health here; model lookup and token counts (:mod:`proxy.http.side_routes`); stored responses and the
Responses API's other routes (:mod:`proxy.http.responses_routes`); admin and UI. On stop, the
requests in flight get ``server.shutdown_timeout`` and no more (:mod:`proxy.http.drain`), and so
do background responses (:mod:`proxy.stored.background`). Request
ids, CORS and the metrics of the other routes are :mod:`proxy.http.edges`'s. The keys the parts are
kept under (:data:`RUNTIME`, :data:`METRICS`, :data:`SERVER`, :data:`RESPONSES`, :data:`DRAIN`) are
:mod:`proxy.http.app_keys`'s, re-exported here. This is the only module that knows every piece.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from proxy.admin import add_admin_routes
from proxy.admin.guard import AdminContext
from proxy.admin.litellm.routes import LiteLLMRoutes, add_litellm_routes
from proxy.admin.overview import Overview
from proxy.admin.readings import Sampler, read
from proxy.admin.requests import REQUEST_LOGS
from proxy.admin.ui import add_ui_routes
from proxy.batches.feature import BatchesFeature
from proxy.core.canonical import ANONYMOUS, Principal
from proxy.core.errors import AuthenticationFailed, GatewayError
from proxy.core.logs import route_stdlib_logging
from proxy.core.metrics import CONTENT_TYPE, Metrics
from proxy.core.plugin import anonymous, authentication
from proxy.db import Database, DatabaseError
from proxy.dialects import all_dialects, other_dialects
from proxy.governance.ledger.journal import Journal, default_directory
from proxy.governance.ledger.rollup import SpendRollup, warm_in_background
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.governance.ledger.writer import LedgerWriter
from proxy.http.app_keys import (  # re-exported
    BACKGROUND,
    DRAIN,
    METRICS,
    RESPONSES,
    RUNTIME,
    SERVER,
)
from proxy.http.dialect_route import dialect_handler, read_body, with_response_state
from proxy.http.drain import Drain
from proxy.http.edges import HttpEdges, error_response, is_anthropic_request
from proxy.http.responses_routes import ResponsesRoutes
from proxy.http.side_routes import SideRoutes
from proxy.http.stored_chat_routes import StoredChatRoutes, chat_store, with_chat_state
from proxy.mcp.gateway import add_mcp_gateway
from proxy.request_logs.service import RequestLogs
from proxy.runtime.config import ConfigError, ResponsesConfig, load_config
from proxy.runtime.plugins import BUILTINS
from proxy.runtime.snapshot import WEAKENINGS, Loader, ReloadRefused, Runtime, Snapshot
from proxy.state.events import KeyEvents
from proxy.state.policy import SharedState
from proxy.stored.background import BackgroundRunner
from proxy.stored.chat_state import ChatState
from proxy.stored.response_state import ResponseState
from proxy.stored.response_store import MemoryResponseStore, ResponseStore
from proxy.stored.responses_db import DatabaseResponseStore


def create_app(
    config_path: str | Path, *, log_stream: Any = None, clock: Callable[[], float] = time.time
) -> web.Application:
    """The gateway application for the config file at ``config_path`` (re-read on SIGHUP).

    Logs go to ``log_stream`` (stdout by default). Files and batches read the time from
    ``clock`` (epoch seconds: their expiry and retention; tests move it). Raises
    :class:`ConfigError` if the config or a plugin's options are invalid. The ``metrics`` and
    ``database`` sections apply from the first load on. The database is opened (created,
    migrated) at start-up when the config demands keys or has a master key, else on first use.
    """
    config = load_config(Path(config_path))
    try:
        database = Database(config.database.url)
    except DatabaseError as exc:
        raise ConfigError([str(exc)]) from None
    metrics = Metrics(max_model_labels=config.metrics.max_model_labels)
    for reason in WEAKENINGS:  # watched by alerts: every series exists from the start, at 0
        metrics.config_reload_refused(reason)
    state = SharedState(config.state, metrics)  # like `database`, as the process started
    journal = config.database.journal_dir
    ledger = LedgerWriter(
        SpendRepository(database),
        Journal(Path(journal) if journal else default_directory(database.path)),
        metrics,
        structlog.get_logger(),
    )
    request_logs = RequestLogs(  # journaled beside the ledger (files of their own prefix)
        config.telemetry.request_logs,
        database,
        metrics,
        structlog.get_logger(),
        journal_dir=Path(
            config.telemetry.request_logs.journal_dir or journal or default_directory(database.path)
        ),
    )
    loader = Loader(
        Path(config_path),
        BUILTINS,
        metrics,
        log_stream,
        state=state,
        database=database,
        ledger=ledger,
        request_logs=request_logs,
    )
    events = KeyEvents(state.redis, lambda key: app[RUNTIME].snapshot.authenticator.drop(key))
    loader.on_key_change = events.announce
    blueprint = loader.load()
    ledger.logger = request_logs.logger = blueprint.logger
    events.logger = blueprint.logger
    if state.redis is not None:
        state.redis.logger = blueprint.logger
    config = blueprint.config
    app = web.Application(client_max_size=config.server.max_body_bytes)
    app[METRICS] = metrics
    app[SERVER] = config.server
    app[DRAIN] = Drain()
    app[REQUEST_LOGS] = request_logs
    uses_database = authentication(blueprint.plugins) is not anonymous or config.auth.master_key
    store = _response_store(config.responses, database, bool(uses_database))
    app[RESPONSES] = ResponseState(store, lambda: app[RUNTIME].snapshot.logger)
    app[BACKGROUND] = BackgroundRunner(
        app[RESPONSES],
        lambda: app[RUNTIME].snapshot.logger,
        ttl=config.responses.ttl,
        max_kept=config.responses.max_entries_per_owner or config.responses.max_entries,
    )

    def on_upstream_error(provider: str, error: GatewayError) -> None:
        metrics.upstream_errors(provider, error.kind).inc()

    sampler = Sampler(lambda: read(metrics), logger=blueprint.logger)
    rollup = SpendRollup(database)
    warming: list[asyncio.Future[None]] = []  # the spend rollups' warm-up at start
    unbridge: list[Callable[[], None]] = []  # undoes route_stdlib_logging at cleanup

    async def start(app: web.Application) -> None:
        snapshot = Snapshot(blueprint, on_upstream_error)
        sampler.start()
        await state.start()
        if snapshot.demands_key or config.auth.master_key:
            await database.open()
            warming.append(asyncio.ensure_future(warm_in_background(rollup, blueprint.logger)))
        await snapshot.start()
        keeps_logs = config.telemetry.request_logs.store != "none"
        await request_logs.start(prune=bool(keeps_logs or snapshot.demands_key or uses_database))
        app[RUNTIME] = Runtime(loader, snapshot, on_upstream_error)
        warming.append(asyncio.ensure_future(_sweep(store, blueprint.logger)))
        unbridge.append(route_stdlib_logging(lambda: app[RUNTIME].snapshot.logger))
        events.start()
        _export_readiness(metrics, snapshot)
        _install_reload_signal(app)

    async def stop(app: web.Application) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await sampler.close()
        for task in warming:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await app[RUNTIME].close()
        await ledger.close()  # after the last request: what is queued is written (or journaled)
        await request_logs.close()
        await events.close()
        await state.close()
        await database.close()
        for undo in unbridge:
            undo()

    app.on_startup.append(start)
    app.on_shutdown.append(_drain)
    app.on_cleanup.append(stop)
    edges = HttpEdges(metrics, config.server.cors)
    side = SideRoutes(
        lambda: app[RUNTIME].snapshot,
        lambda request: read_body(request, config.server),
        edges.request_id,
    )
    responses = ResponsesRoutes(
        lambda: app[RUNTIME].snapshot,
        app[RESPONSES],
        app[BACKGROUND],
        lambda request: read_body(request, config.server),
        edges.request_id,
    )
    chats = ChatState(  # stored chat completions (store: true), kept as responses are
        chat_store(config.responses, database, bool(uses_database)),
        lambda: app[RUNTIME].snapshot.logger,
    )
    StoredChatRoutes(
        lambda: app[RUNTIME].snapshot, chats, lambda request: read_body(request, config.server)
    ).add_to(app, edges.plain)
    for dialect in (*all_dialects(), *other_dialects()):
        around, background = None, None
        if dialect.name == "responses":
            around, background = with_response_state(app[RESPONSES]), app[BACKGROUND]
        elif dialect.name == "openai":
            around = with_chat_state(chats)
        handler = dialect_handler(dialect, app, edges.request_id, around, background)
        for path in dialect.paths:
            app.router.add_post(path, handler)
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", edges.plain(f"{prefix}/models", _models))
        model = f"{prefix}/models/{{model:.+}}"
        app.router.add_get(model, edges.plain(model, side.model))
        for method, path, handler in (  # fixed paths before /responses/{id}: matched in order
            ("POST", "/responses/input_tokens", responses.input_tokens),
            ("POST", "/responses/compact", responses.compact),
            ("GET", "/responses/{response_id}/input_items", responses.input_items),
            ("POST", "/responses/{response_id}/cancel", responses.cancel),
            ("GET", "/responses/{response_id}", responses.retrieve),
            ("DELETE", "/responses/{response_id}", responses.delete),
        ):
            route = edges.plain(prefix + path, handler)
            if method == "GET":  # with HEAD, as every GET route
                app.router.add_get(prefix + path, route)
            else:
                app.router.add_route(method, prefix + path, route)
    BatchesFeature(  # files and batches (/v1/files, /v1/batches), their executor
        config.batches,
        database,
        metrics,
        lambda: app[RUNTIME].snapshot,
        lambda request: read_body(request, config.server),
        edges.request_id,
        clock,
    ).add_to(app, edges.plain)
    count = "/v1/messages/count_tokens"
    app.router.add_post(count, edges.plain(count, side.count_tokens))
    app.router.add_get("/metrics", edges.plain("/metrics", _metrics))
    app.router.add_get("/health/live", edges.plain("/health/live", _live))
    app.router.add_get("/health/ready", edges.plain("/health/ready", _ready))
    add_admin_routes(
        app,
        AdminContext(
            database,
            lambda: app[RUNTIME].snapshot.authenticator,
            lambda: reload_runtime(app),
            ledger,
            overview=Overview(sampler, lambda: read(metrics)),
            snapshot=lambda: app[RUNTIME].snapshot,
            health=state.store_for("health"),
        ),
        edges.plain,
    )
    add_ui_routes(app, edges.plain)
    app[RESPONSES].mcp = add_mcp_gateway(  # /mcp, /mcp/{server}; Responses' mcp tools
        app,
        config.mcp,
        state=state,
        ledger=ledger,
        metrics=metrics,
        authenticate=lambda headers: _mcp_principal(app[RUNTIME].snapshot, headers),
        logger=lambda: app[RUNTIME].snapshot.logger if RUNTIME in app else blueprint.logger,
        request_id=edges.request_id,
        wrap=edges.plain,
        tracer=lambda: app[RUNTIME].snapshot.tracer,
    )
    if config.compat.litellm:
        add_litellm_routes(app, LiteLLMRoutes(lambda: app[RUNTIME].snapshot), edges.plain)
    app.router.add_route("*", "/{tail:(?s:.*)}", edges.unmatched)  # newlines too
    edges.install(app)
    return app


def _response_store(
    config: ResponsesConfig, database: Database, uses_database: bool
) -> ResponseStore:
    """Where stored responses go (``responses.store``; ``auto`` follows ``uses_database``)."""
    if config.store == "database" or (config.store == "auto" and uses_database):
        return DatabaseResponseStore(
            database,
            ttl=config.ttl,
            max_entries=config.max_entries,
            max_bytes=config.max_bytes,
            max_entries_per_owner=config.max_entries_per_owner,
            max_bytes_per_owner=config.max_bytes_per_owner,
        )
    return MemoryResponseStore(
        ttl=config.ttl,
        max_entries=config.max_entries,
        max_bytes=config.max_bytes,
        max_entries_per_owner=config.max_entries_per_owner,
        max_bytes_per_owner=config.max_bytes_per_owner,
    )


def reload_runtime(app: web.Application) -> bool:
    """Reload the config file; on error keep serving the old one. Returns whether it worked.

    A config weaker than the serving one (:func:`proxy.runtime.snapshot.weakenings`) is refused
    unless the serving one allows it: logged (``config_reload_refused``, with its reasons), counted
    as an error and by reason. One it allows is logged as a warning naming what it dropped.
    """
    runtime, metrics = app[RUNTIME], app[METRICS]
    path = str(runtime.loader.config_path)
    try:
        snapshot = runtime.reload()
    except ReloadRefused as refused:
        metrics.config_reloads("error").inc()
        for reason in refused.reasons:
            metrics.config_reload_refused(reason).inc()
        runtime.snapshot.logger.error(
            "config_reload_refused", path=path, reasons=list(refused.reasons), errors=refused.errors
        )
        return False
    except ConfigError as exc:
        metrics.config_reloads("error").inc()
        runtime.snapshot.logger.error("config_reload_failed", path=path, errors=exc.errors)
        return False
    except Exception:  # a bug while building the new snapshot: keep serving the old one
        metrics.config_reloads("error").inc()
        runtime.snapshot.logger.exception("config_reload_failed", path=path)
        return False
    metrics.config_reloads("ok").inc()
    _export_readiness(metrics, snapshot)
    if snapshot.weakened:
        snapshot.logger.warning("config_reloaded", path=path, weakened=list(snapshot.weakened))
    else:
        snapshot.logger.info("config_reloaded", path=path)
    runtime.starting = asyncio.ensure_future(snapshot.start())  # plugins' start() hooks
    return True


async def _drain(app: web.Application) -> None:
    """On stop, once the server listens no more: the requests in flight get
    ``server.shutdown_timeout`` seconds, then those still running are ended
    (:meth:`proxy.http.drain.Drain.stop`) and the count logged."""
    timeout = app[SERVER].shutdown_timeout
    ended, stopped = await asyncio.gather(app[DRAIN].stop(timeout), app[BACKGROUND].stop(timeout))
    if ended or stopped:
        app[RUNTIME].snapshot.logger.warning(
            "shutdown_deadline", ended=ended, background_stopped=stopped, timeout=timeout
        )


async def _sweep(store: ResponseStore, logger: Any) -> None:
    """At start-up: the background responses a stopped process left running are written
    ``failed`` once their lease has passed (:meth:`ResponseStore.sweep`); a store that cannot
    answer is logged and left to the reads, which report them so anyway."""
    try:
        swept = await store.sweep()
    except Exception:
        logger.exception("background_sweep_failed")
        return
    if swept:
        logger.warning("background_responses_failed_at_start", count=swept)


def _install_reload_signal(app: web.Application) -> None:
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_runtime, app)
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
        return


def _export_readiness(metrics: Metrics, snapshot: Snapshot) -> None:
    for name, provider in snapshot.providers.items():
        metrics.provider_ready(name).set(1 if provider.ready else 0)


async def _models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the aliases and direct targets that can be routed right now (those
    the client's key may use, when the gateway demands keys)."""
    snapshot = request.app[RUNTIME].snapshot
    principal = ANONYMOUS
    if snapshot.demands_key:
        try:
            principal = await snapshot.authenticate(request.headers)
        except GatewayError as error:
            return error_response(error, anthropic_shape=is_anthropic_request(request))
    router = snapshot.router
    entries: list[tuple[str, str]] = []
    for alias, deployments in router.aliases().items():
        ready = [d for d in deployments if router.is_ready(d.provider)]
        if ready:
            entries += [(alias, "crossway")] + [(d.target, d.provider) for d in ready]
    for name, provider in snapshot.providers.items():
        if provider.ready:
            listed = snapshot.capabilities[name].listed_models
            entries += [(f"{name}/{m}", name) for m in listed]
    data: list[dict[str, Any]] = []
    seen: set[str] = set()
    for model_id, owner in entries:
        if model_id not in seen and principal.allows(model_id):
            seen.add(model_id)
            data.append({"id": model_id, "object": "model", "created": 0, "owned_by": owner})
    return web.json_response({"object": "list", "data": data})


async def _mcp_principal(snapshot: Snapshot, headers: Mapping[str, str]) -> Principal:
    """The caller of an MCP route: its key's principal when the gateway demands keys (raising
    as the model routes do), else anonymous."""
    return await snapshot.authenticate(headers) if snapshot.demands_key else ANONYMOUS


async def _metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus exposition (open unless ``require_auth_for_metrics``)."""
    snapshot = request.app[RUNTIME].snapshot
    if snapshot.config.server.require_auth_for_metrics:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not snapshot.authenticator.is_master(token.strip()):
            error = AuthenticationFailed("/metrics needs the master key (Bearer)")
            return error_response(error, anthropic_shape=False)
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"content-type": CONTENT_TYPE})


async def _live(request: web.Request) -> web.Response:
    """``GET /health/live``: the process serves HTTP."""
    return web.json_response({"status": "ok"})


async def _ready(request: web.Request) -> web.Response:
    """``GET /health/ready``: a config is loaded and at least one provider is ready (else 503)."""
    snapshot = request.app[RUNTIME].snapshot
    providers = {name: p.ready for name, p in snapshot.providers.items()}
    ready = snapshot.ready
    return web.json_response(
        {"status": "ready" if ready else "not_ready", "providers": providers},
        status=200 if ready else 503,
    )
