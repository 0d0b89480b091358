"""The capture link: where it sits in the chain, whose requests it keeps, what a stream leaves
behind (bounded), and the records its finished hook queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from proxy.core.canonical import Call, Message, Principal
from proxy.core.metrics import Metrics
from proxy.core.plugin import FinishedRequest, Plugin
from proxy.core.redact import Redactor
from proxy.core.reply import Chunk, ChunkChoice, Delta, Reply
from proxy.db import Database
from proxy.request_logs.capture import RequestCapture, capture_for, placed
from proxy.request_logs.config import RequestLogsConfig
from proxy.request_logs.records import RequestLogRecord
from proxy.request_logs.service import RequestLogs


class Link:
    def __init__(self, name: str) -> None:
        self.name = name

    async def __call__(self, call: Call, next: Any) -> Reply:
        return await next(call)


class ScanningMask(Link):
    """A masking plugin whose output scan redacts the word "secretive"."""

    def scrub(self, text: str) -> str:
        return text.replace("secretive", "<WORD>")


def names(links: list[Plugin]) -> list[str]:
    return [getattr(link, "name", "capture") for link in links]


def test_the_link_sits_just_inside_the_last_masking_plugin_else_first(tmp_path: Path) -> None:
    service, _ = logs(tmp_path)
    links: list[Plugin] = [Link("auth"), Link("masking"), Link("cache"), Link("cost")]
    refs = ["auth", "masking", "cache", "cost"]
    capture = RequestCapture(service, "payloads", Redactor(), 4096)
    placed_links = placed(links, refs, ("masking", "plugins.masking:MaskingPlugin"), capture)
    assert names(placed_links) == ["auth", "masking", "capture", "cache", "cost"]
    assert capture.scrub is None  # that masking link does not rewrite answers
    custom = ["auth", "plugins.masking:MaskingPlugin", "cache", "cost"]
    by_path = placed(links, custom, ("masking", "plugins.masking:MaskingPlugin"), capture)
    assert names(by_path) == ["auth", "masking", "capture", "cache", "cost"]
    without = placed(links[:1], ["auth"], ("masking",), capture)
    assert names(without) == ["capture", "auth"]


async def test_an_answer_is_scrubbed_as_the_masking_output_scan_would(tmp_path: Path) -> None:
    service, queued = logs(tmp_path)
    capture = RequestCapture(service, "payloads", Redactor(), 4096)
    placed([ScanningMask("masking")], ["masking"], ("masking",), capture)
    assert capture.scrub is not None

    async def upstream(call: Call) -> Reply:
        stream = Chunks([chunk("a secre"), chunk("tive answer", finish=True)])
        return Reply(provider="up", model="echo", stream=stream)

    call = call_by(Principal())
    reply = await capture(call, upstream)
    assert reply.stream is not None
    async for _ in reply.stream:  # type: ignore[attr-defined]
        pass
    capture.finished(finished_of(call))
    (record,) = queued
    assert record.response is not None
    assert "secretive" not in record.response
    assert '"content":"a <WORD> answer"' in record.response


def logs(tmp_path: Path, **config: Any) -> tuple[RequestLogs, list[RequestLogRecord]]:
    service = RequestLogs(
        RequestLogsConfig(**config),
        Database(f"sqlite:///{tmp_path}/db.sqlite"),
        Metrics(),
        structlog.get_logger(),
        journal_dir=tmp_path / "journal",
    )
    queued: list[RequestLogRecord] = []
    service.record = queued.append  # type: ignore[method-assign]
    return service, queued


def test_no_link_when_nothing_can_be_kept(tmp_path: Path) -> None:
    service, _ = logs(tmp_path)
    assert capture_for(None, "payloads", Redactor(), True) is None
    assert capture_for(service, "none", Redactor(), False) is None
    assert capture_for(service, "none", Redactor(), True) is not None  # a key may opt in
    assert capture_for(service, "metadata", Redactor(), False) is not None


def finished_of(call: Call) -> FinishedRequest:
    return FinishedRequest(
        request_id=call.request_id,
        dialect="openai",
        call=call,
        principal=call.principal,
        status=200,
        provider="up",
        upstream_model="echo",
        usage=None,
        error_code=None,
        duration=0.01,
        ended_at=1_800_000_000.0,
        attempts=1,
    )


def chunk(text: str, finish: bool = False) -> Chunk:
    choice = ChunkChoice(
        index=0, delta=Delta(content=text), finish_reason="stop" if finish else None
    )
    return Chunk(id="c", model="echo", choices=[choice])


class Chunks:
    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> Chunk:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        return None


def call_by(principal: Principal, text: str = "hi") -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="chat",
        messages=[Message(role="user", content=text)],
        principal=principal,
    )


async def test_modes_by_key_then_team_then_config_and_streams_assembled(tmp_path: Path) -> None:
    service, queued = logs(tmp_path)
    capture = RequestCapture(service, "metadata", Redactor(), 4096)
    loud = Principal(key_id="k1", team="t", request_logs="payloads")
    quiet = Principal(key_id="k2", team="t", request_logs="none")
    default = Principal(key_id="k3")
    assert [capture.mode(p) for p in (loud, quiet, default)] == ["payloads", "none", "metadata"]

    async def upstream(call: Call) -> Reply:
        stream = Chunks([chunk("Hel"), chunk("lo"), chunk("!", finish=True)])
        return Reply(provider="up", model="echo", stream=stream)

    for principal in (loud, quiet, default):
        call = call_by(principal)
        reply = await capture(call, upstream)
        assert reply.stream is not None
        assert "".join([c.choices[0].delta.content async for c in reply.stream]) == "Hello!"  # type: ignore[misc]
        capture.finished(finished_of(call))
    assert [record.key_id for record in queued] == ["k1", "k3"]  # "none" keeps nothing
    kept, metadata = queued
    assert kept.request is not None
    assert '"content":"hi"' in kept.request
    assert kept.response is not None
    assert '"content":"Hello!"' in kept.response
    assert '"finish_reason":"stop"' in kept.response
    assert metadata.request is None
    assert metadata.store == "metadata"


async def test_a_long_stream_is_kept_up_to_its_bound(tmp_path: Path) -> None:
    service, queued = logs(tmp_path)
    capture = RequestCapture(service, "payloads", Redactor(), 256)

    async def upstream(call: Call) -> Reply:
        pieces = [chunk("x" * 50) for _ in range(20)] + [chunk("", finish=True)]
        return Reply(provider="up", model="echo", stream=Chunks(pieces))

    call = call_by(Principal())
    reply = await capture(call, upstream)
    assert reply.stream is not None
    sent = "".join([c.choices[0].delta.content or "" async for c in reply.stream])  # type: ignore[misc]
    assert len(sent) == 1000  # the client gets everything
    capture.finished(finished_of(call))
    (record,) = queued
    assert record.truncated is True
    assert record.response is not None
    assert len(record.response.encode()) <= 256


async def test_a_request_that_never_reached_the_link_keeps_metadata_only(tmp_path: Path) -> None:
    service, queued = logs(tmp_path)
    capture = RequestCapture(service, "payloads", Redactor(), 4096)
    capture.finished(finished_of(call_by(Principal(), "refused before the link")))
    (record,) = queued
    assert record.store == "payloads"
    assert record.request is None
