"""Running the gateway: one process, or a supervisor and N workers sharing one port.

With ``workers > 1`` the parent binds nothing itself: it starts N worker processes that each
listen on the same host and port with ``SO_REUSEPORT`` (the kernel spreads connections), points
prometheus-client's multiprocess mode at a private directory so ``/metrics`` on any worker shows
the whole server, forwards SIGHUP (reload) and SIGTERM/SIGINT (graceful stop) to the workers, and
restarts a worker that dies unexpectedly. uvloop is used when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from proxy.core.metrics import MULTIPROC_ENV
from proxy.state.config import per_worker, per_worker_message

if TYPE_CHECKING:
    from aiohttp import web

# The cyclic garbage collector's youngest-generation threshold while serving (CPython's default
# is 700). A request allocates a few hundred container objects, nearly all freed by reference
# counting; at 700 the collector ran every couple of requests and cost about 10 % of the CPU per
# request at concurrency 64 (bench: 0.259 -> 0.225 ms non-streamed, with p99 latency lower too).
_GC_YOUNG_THRESHOLD = 10_000
# Header fields up to 16 KiB reach the application (aiohttp stops at 8 KiB with a bare 400), so
# that a long credential header is refused like any other bad key: 401 in the route's shape.
MAX_HEADER_FIELD_BYTES = 16 * 1024
_RESTART_PAUSE = 1.0
_MAX_RESTART_PAUSE = 30.0
_STABLE_AFTER = 10.0  # seconds a worker must live for its next restart to be quick again
# What aiohttp's own graceful stop may add once the app's drain (proxy.http.drain) has waited
# server.shutdown_timeout and ended the requests still running: it waits this long for handlers
# still busy, cancels them, and waits this long again (its timeout counts twice).
_AFTER_DRAIN = 0.1


class ServeOptions:
    """Where and how to serve; ``None`` fields fall back to the config's ``server`` section."""

    def __init__(
        self,
        config_path: Path,
        host: str | None = None,
        port: int | None = None,
        workers: int | None = None,
    ) -> None:
        self.config_path = config_path
        self.host = host
        self.port = port
        self.workers = workers


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(options: ServeOptions) -> None:
    """Serve until SIGTERM/SIGINT. Raises :class:`proxy.runtime.config.ConfigError` on a bad config.

    Once the gateway listens, one log line says so: ``listening on http://HOST:PORT``, with the
    worker count, the config path and which providers are ready (with several workers, the
    first one to start says it).
    """
    from proxy.runtime.config import load_config

    config = load_config(options.config_path)
    workers = options.workers or config.server.workers
    host = options.host or config.server.host
    port = config.server.port if options.port is None else options.port
    if workers == 1:
        run_worker(options.config_path, host, port, reuse_port=False)
        return
    _supervise(options.config_path, host, port, workers)


def run_worker(
    config_path: Path,
    host: str,
    port: int,
    *,
    reuse_port: bool,
    workers: int = 1,
    announce: bool = True,
) -> None:
    """Run one gateway process on ``host:port`` until SIGTERM/SIGINT; with ``announce``, log
    the start-up line (see :func:`serve`) once it listens, as one of ``workers``.

    The app is served through :class:`proxy.aiohttp_ext.server.GatewayRunner` (requests aiohttp's
    parser rejects are answered as the gateway), on a loop of its own, as ``web.run_app`` would.
    """
    from aiohttp import web

    from proxy.aiohttp_ext.server import GatewayRunner
    from proxy.http.app_keys import DRAIN, METRICS, RUNTIME, SERVER
    from proxy.http.rejections import rejection_answers
    from proxy.server.app import create_app

    app = create_app(config_path)
    server = app[SERVER]
    runner = GatewayRunner(
        app,
        on_rejected=rejection_answers(app[METRICS], lambda: app[RUNTIME].snapshot.logger),
        drain=app[DRAIN],
        handle_signals=True,  # SIGTERM/SIGINT raise GracefulExit in the loop
        # The app's on_shutdown gives requests server.shutdown_timeout (proxy.http.drain)
        shutdown_timeout=_AFTER_DRAIN,
        # aiohttp closes a connection that has no whole request once this passes, from its
        # start or its last answer: idle keep-alive connections and slow-header clients alike.
        keepalive_timeout=server.client_idle_timeout,
        handler_cancellation=True,
        max_field_size=MAX_HEADER_FIELD_BYTES,
        access_log=None,
    )
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    tune_gc()
    # One run of the loop from set-up to the stop signal: uvloop drops a signal that arrives
    # while its loop is not running, so there must be no gap between runs once the handlers
    # are installed (a SIGTERM right after start-up would otherwise leave the worker serving).
    serving = loop.create_task(_serve(runner, host, port, reuse_port, announce, workers))
    try:
        loop.run_until_complete(serving)
    except web.GracefulExit:
        pass
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError, web.GracefulExit):
            loop.run_until_complete(serving)
        loop.run_until_complete(runner.cleanup())  # drains in-flight requests, then stops
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        asyncio.set_event_loop(None)


async def _serve(
    runner: Any, host: str, port: int, reuse_port: bool, announce: bool, workers: int
) -> None:
    """Set ``runner`` up (the app's start-up runs here), listen on ``host:port``, announce it
    when asked, then wait until a signal's ``GracefulExit`` ends the loop's run."""
    from aiohttp import web

    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_port=reuse_port).start()
    if announce:
        log_listening(runner.app, host, port, workers)
    await asyncio.Event().wait()


def log_listening(app: web.Application, host: str, port: int, workers: int) -> None:
    """Log where the gateway listens, with its workers, config and provider readiness."""
    from proxy.http.app_keys import RUNTIME

    runtime = app[RUNTIME]
    snapshot = runtime.snapshot
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    providers = snapshot.providers
    config = snapshot.config
    uses = per_worker(config.state, [spec.ref for spec in config.plugins], workers)
    if uses:
        snapshot.logger.warning(
            "state_per_worker", per_worker=uses, message=per_worker_message(uses, workers)
        )
    snapshot.logger.info(
        f"listening on {url}",
        url=url,
        workers=workers,
        config=str(runtime.loader.config_path),
        providers_ready=[name for name, p in providers.items() if p.ready],
        providers_not_ready=[name for name, p in providers.items() if not p.ready],
    )


def tune_gc() -> None:
    """Set the garbage collector up for serving; call once, after start-up, in a worker.

    What start-up allocated (modules, config, app) is frozen out of future collections, and the
    youngest generation is collected every ``_GC_YOUNG_THRESHOLD`` allocations instead of 700.
    Objects are still freed by reference counting as soon as they are unused; only reference
    cycles wait longer, bounded by the threshold.
    """
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, middle, oldest)


def _worker_main(config_path: Path, host: str, port: int, workers: int, announce: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; it sends SIGTERM
    # A SIGHUP forwarded while this worker is still starting would kill it (the default action);
    # the app installs its reload handler once it runs, and reads the config afresh anyway.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    run_worker(config_path, host, port, reuse_port=True, workers=workers, announce=announce)


def _supervise(config_path: Path, host: str, port: int, count: int) -> None:
    metrics_dir = tempfile.mkdtemp(prefix="crossway-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start(announce: bool = False) -> multiprocessing.process.BaseProcess:
        process = context.Process(
            target=_worker_main, args=(config_path, host, port, count, announce), daemon=False
        )
        process.start()
        return process

    workers: list[multiprocessing.process.BaseProcess] = []
    terminated: set[int] = set()

    def terminate_all() -> None:
        # Also called from the loop: a worker started while the signal was being handled (a
        # restart) is told to stop too, once.
        for process in workers:
            pid = process.pid
            if pid is not None and pid not in terminated and process.is_alive():
                terminated.add(pid)
                os.kill(pid, signal.SIGTERM)

    def forward(signum: int) -> Callable[[int, FrameType | None], None]:
        def handler(received: int, frame: FrameType | None) -> None:
            nonlocal stopping
            if signum != signal.SIGHUP:
                stopping = True
                terminate_all()
                return
            for process in workers:
                if process.pid is not None and process.is_alive():
                    os.kill(process.pid, signal.SIGHUP)

        return handler

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward(signum))  # before any worker starts: none is missed
    for index in range(count):
        if not stopping:
            workers.append(start(announce=index == 0))
    started_at = [time.monotonic()] * len(workers)
    pauses = [_RESTART_PAUSE / 2] * len(workers)
    reaped: set[int | None] = set()
    try:
        while not (stopping and all(p.exitcode is not None for p in workers)):
            # Only the sentinels of workers still running: a reaped worker's stays ready for
            # good, and waiting on it would spin while the others drain.
            running = [p.sentinel for p in workers if p.pid not in reaped]
            multiprocessing.connection.wait(running, timeout=1.0)
            for i, process in enumerate(workers):
                if process.exitcode is None or process.pid in reaped:
                    continue
                reaped.add(process.pid)
                _mark_dead(process.pid)
                # A worker that dies soon after starting (a broken config on disk, a port
                # taken) is restarted ever more slowly, up to _MAX_RESTART_PAUSE.
                lived = time.monotonic() - started_at[i]
                pauses[i] = (
                    _RESTART_PAUSE
                    if lived > _STABLE_AFTER
                    else min(pauses[i] * 2, _MAX_RESTART_PAUSE)
                )
                pause_until = time.monotonic() + pauses[i]
                while not stopping and time.monotonic() < pause_until:
                    time.sleep(0.1)
                if not stopping:  # a SIGTERM may have come during the pause
                    workers[i] = start()
                    started_at[i] = time.monotonic()
            if stopping:
                terminate_all()
    finally:
        for process in workers:
            if process.is_alive():
                process.terminate()
            process.join()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _mark_dead(pid: int | None) -> None:
    if pid is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated
