"""The client side's connection: aiohttp's client protocol, resuming reading only when it was
paused, whose answers' bodies are :class:`~proxy.aiohttp_ext.upstream_body.UpstreamBody` readers,
and the connector that makes such connections (:class:`proxy.upstream.transport.HttpTransport`'s).

It leans on two aiohttp internals: the client protocol class (``aiohttp.client_proto``), and the
connector's protocol factory (``_factory``), set as aiohttp's own constructor sets it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_parser import RawResponseMessage
from aiohttp.streams import StreamReader

from proxy.aiohttp_ext.flow_control import ResumeWhenPaused
from proxy.aiohttp_ext.upstream_body import UpstreamBody


class UpstreamConnection(ResumeWhenPaused, ResponseHandler):
    """aiohttp's client protocol, resuming reading only when it was paused
    (:mod:`proxy.aiohttp_ext.flow_control`: here once per buffered HTTP chunk of an answer), whose
    answers' bodies are :class:`~proxy.aiohttp_ext.upstream_body.UpstreamBody` readers."""

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        """Queue an answer (its head and its body's reader) for the response to read, giving
        the reader :class:`~proxy.aiohttp_ext.upstream_body.UpstreamBody`'s class (aiohttp's parser
        makes plain ones; a body-less answer's shared empty reader is left as it is)."""
        body = data[1]
        if type(body) is StreamReader:
            body.__class__ = UpstreamBody
        super().feed_data(data, size)


class UpstreamConnector(aiohttp.TCPConnector):
    """``aiohttp.TCPConnector`` that connects with :class:`UpstreamConnection` (it sets the
    connector's protocol factory, ``_factory``, as aiohttp's own constructor does)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Widened to a ResponseHandler maker: aiohttp types _factory as partial[ResponseHandler],
        # and partial is invariant in its result.
        connection: Callable[..., ResponseHandler] = UpstreamConnection
        self._factory = functools.partial(connection, loop=self._loop)
