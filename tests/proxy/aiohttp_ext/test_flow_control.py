"""proxy/aiohttp_ext/flow_control.py: a resume passes on to the protocol only when reading was
paused."""

from __future__ import annotations

from aiohttp.client_proto import ResponseHandler
from aiohttp.web_protocol import RequestHandler

from proxy.aiohttp_ext.flow_control import ResumeWhenPaused
from proxy.aiohttp_ext.server import GatewayRequestHandler
from proxy.aiohttp_ext.upstream_connection import UpstreamConnection


class _Protocol:
    def __init__(self) -> None:
        self._reading_paused = False
        self.resumed: list[bool] = []

    def resume_reading(self, resume_parser: bool = True) -> None:
        self.resumed.append(resume_parser)
        self._reading_paused = False


class _Guarded(ResumeWhenPaused, _Protocol):
    pass


def test_a_resume_reaches_the_protocol_only_after_a_pause() -> None:
    protocol = _Guarded()
    protocol.resume_reading()
    assert protocol.resumed == []
    protocol._reading_paused = True
    protocol.resume_reading(resume_parser=False)
    assert protocol.resumed == [False]
    protocol.resume_reading()  # resumed already: nothing to do
    assert protocol.resumed == [False]


def test_the_gateways_connections_resume_through_it() -> None:
    for protocol, aiohttps in (
        (GatewayRequestHandler, RequestHandler),
        (UpstreamConnection, ResponseHandler),
    ):
        assert protocol.resume_reading is ResumeWhenPaused.resume_reading
        assert protocol.__mro__.index(ResumeWhenPaused) < protocol.__mro__.index(aiohttps)
