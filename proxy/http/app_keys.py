"""The application's keys: where :func:`proxy.server.app.create_app` keeps the parts the routes
read.

A module of its own so that the routes (:mod:`proxy.http.dialect_route`) can read them without
importing the module that builds the app; :mod:`proxy.server.app` re-exports them.
"""

from __future__ import annotations

from aiohttp import web

from proxy.core.metrics import Metrics
from proxy.http.drain import Drain
from proxy.runtime.config import ServerConfig
from proxy.runtime.snapshot import Runtime
from proxy.stored.background import BackgroundRunner
from proxy.stored.response_state import ResponseState

RUNTIME = web.AppKey("runtime", Runtime)
METRICS = web.AppKey("metrics", Metrics)
SERVER = web.AppKey("server", ServerConfig)
RESPONSES = web.AppKey("responses", ResponseState)
DRAIN = web.AppKey("drain", Drain)
BACKGROUND = web.AppKey("background", BackgroundRunner)
