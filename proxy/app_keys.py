"""The application's keys: where :func:`proxy.app.create_app` keeps the parts the routes read.

A module of its own so that the routes (:mod:`proxy.dialect_route`) can read them without
importing the module that builds the app; :mod:`proxy.app` re-exports them.
"""

from __future__ import annotations

from aiohttp import web

from proxy.config import ServerConfig
from proxy.drain import Drain
from proxy.metrics import Metrics
from proxy.response_state import ResponseState
from proxy.runtime import Runtime

RUNTIME = web.AppKey("runtime", Runtime)
METRICS = web.AppKey("metrics", Metrics)
SERVER = web.AppKey("server", ServerConfig)
RESPONSES = web.AppKey("responses", ResponseState)
DRAIN = web.AppKey("drain", Drain)
