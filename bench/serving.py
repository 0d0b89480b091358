"""Serve an aiohttp application until the process is asked to stop."""

import asyncio
import signal

from aiohttp import web

# Large enough that a burst of 256 simultaneous connects never overflows the accept queue.
_BACKLOG = 2048


async def serve_until_signalled(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` without access logging until SIGTERM or SIGINT.

    Returns after the server has shut down (in-flight requests get one second).
    """
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=_BACKLOG)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
