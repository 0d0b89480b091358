"""Running checks around a chain: input blocks before anything is sent, warnings in a header,
a webhook's modification, json_schema's one retry, failures under on_error, and streamed
answers — a word split across chunks caught before any of it is released, held streams, checks
at the end — with every verdict counted, recorded and logged without text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import Call, Message, Params
from proxy.core.metrics import Metrics
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, RawFrames, Reply, Response
from proxy.guardrails.checks import Check, build_checks
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import CheckConfig, Phase, SecretsCheck, parse_checks
from proxy.guardrails.engine import Guardrails
from proxy.guardrails.texts import TextSet
from proxy.guardrails.verdicts import Finding, GuardrailBlocked
from proxy.pii.detectors import Finder

FILLER = "lorem ipsum dolor sit amet " * 12
SECTION: dict[str, Any] = {
    "words": {"type": "keywords", "words": ["acme"], "on": "output"},
    "noted": {"type": "keywords", "words": ["nightjar"], "on": "both", "action": "warn"},
    "schema": {"type": "json_schema", "action": "retry"},
    "schema-end": {"type": "json_schema", "stream": "end"},
    "secrets": {"type": "secrets"},
}
FORMAT = {"type": "json_object"}


class Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


class Scripted:
    """A check that answers what it was told to, on input."""

    def __init__(self, name: str, finding: Finding, on_error: str = "block") -> None:
        self.name = name
        self.config: CheckConfig = SecretsCheck(on="input")
        self.finder: Finder | None = None
        self.finding = finding
        self.seen: list[list[str]] = []

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        self.seen.append(list(texts.texts))
        return self.finding


class Upstream:
    """The chain's inner links: answers ``answers`` in turn, whole or streamed in pieces."""

    def __init__(self, *answers: str, piece: int = 1) -> None:
        self.answers = list(answers)
        self.calls: list[Call] = []
        self.piece = piece

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        text = self.answers.pop(0)
        if not call.stream:
            message = Message(role="assistant", content=text)
            response = Response(id="a", model="m", choices=[Choice(index=0, message=message)])
            return Reply(provider="p", model="m", response=response)
        return Reply(provider="p", model="m", stream=_pieces(text, self.piece))


async def _pieces(text: str, size: int) -> AsyncIterator[Chunk]:
    for start in range(0, len(text), size):
        delta = Delta(content=text[start : start + size])
        yield Chunk(id="c", model="m", choices=[ChunkChoice(index=0, delta=delta)])
    yield Chunk(id="c", model="m", choices=[ChunkChoice(index=0, finish_reason="stop")])


def setup(**extra: Check) -> tuple[Guardrails, dict[str, Check], Metrics, Logger]:
    metrics = Metrics()
    logger = Logger()
    built = build_checks(parse_checks(SECTION, "$.guardrails", []), {}, Clients())
    built.update(extra)
    return Guardrails(metrics, logger, 64), built, metrics, logger


def call(text: str, *, stream: bool = False, **params: Any) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content=text)],
        stream=stream,
        params=Params(**params),
    )


def count(metrics: Metrics, check: str, phase: str, verdict: str) -> float:
    series = (
        f'crossway_guardrail_checks_total{{check="{check}",phase="{phase}",verdict="{verdict}"}} '
    )
    for line in metrics.render().decode().splitlines():
        if line.startswith(series):
            return float(line.removeprefix(series))
    return 0.0


async def read(reply: Reply) -> tuple[str, GuardrailBlocked | None]:
    assert reply.stream is not None
    text: list[str] = []
    try:
        async for chunk in reply.stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
    except GuardrailBlocked as blocked:
        return "".join(text), blocked
    return "".join(text), None


async def test_an_input_block_sends_nothing() -> None:
    guardrails, checks, metrics, logger = setup()
    upstream = Upstream("never")
    secret = "sk-proj-" + "abc123DEF456ghi789JKL012mno345"
    with pytest.raises(GuardrailBlocked) as caught:
        await guardrails.guard(call(f"key {secret}"), [checks["secrets"]], upstream)
    assert caught.value.attempts == 0
    assert caught.value.code == "content_policy_violation"
    assert caught.value.message == "the request was blocked by the guardrail 'secrets'"
    assert upstream.calls == []
    assert count(metrics, "secrets", "input", "block") == 1
    assert logger.lines == [
        (
            "guardrail_verdicts",
            {
                "request_id": "r",
                "verdicts": [{"check": "secrets", "phase": "input", "verdict": "block"}],
            },
        )
    ]


async def test_warnings_are_served_named_and_recorded() -> None:
    guardrails, checks, metrics, _ = setup()
    request = call("the nightjar")
    reply = await guardrails.guard(request, [checks["noted"]], Upstream("a nightjar too"))
    assert reply.headers["x-crossway-guardrails"] == "warned=noted"
    assert request.accounting.guardrails == [
        {"check": "noted", "phase": "input", "verdict": "warn"},
        {"check": "noted", "phase": "output", "verdict": "warn"},
    ]
    assert count(metrics, "noted", "output", "warn") == 1


async def test_a_modification_goes_upstream_and_a_failure_follows_on_error() -> None:
    rewrite = Scripted("rewrite", Finding(replacement=["clean"]))
    failing = Scripted("failing", Finding(failed=True, reason="timed out"))
    guardrails, _, metrics, _ = setup()
    upstream = Upstream("ok")
    with pytest.raises(GuardrailBlocked):
        await guardrails.guard(call("dirty"), [rewrite, failing], upstream)
    assert failing.seen == [["clean"]]  # the second check read what the first left
    assert count(metrics, "failing", "input", "error_block") == 1
    assert count(metrics, "rewrite", "input", "modify") == 1
    failing.config = parse_checks(
        {"f": {"type": "webhook", "url": "http://127.0.0.1:9/", "on_error": "allow"}}, "$", []
    )["f"]
    request = call("dirty")
    reply = await guardrails.guard(request, [rewrite, failing], upstream)
    assert reply.response is not None
    assert upstream.calls[0].messages[0].content == "clean"
    assert count(metrics, "failing", "input", "error_allow") == 1


async def test_json_schema_retries_once_then_blocks() -> None:
    guardrails, checks, metrics, _ = setup()
    upstream = Upstream("nope", '{"a": 1}', "nope", "still not")
    reply = await guardrails.guard(call("q", response_format=FORMAT), [checks["schema"]], upstream)
    assert reply.response is not None
    assert reply.attempts == 2
    assert reply.response.choices[0].message.content == '{"a": 1}'
    with pytest.raises(GuardrailBlocked, match="the answer was blocked by the guardrail 'schema'"):
        await guardrails.guard(call("q", response_format=FORMAT), [checks["schema"]], upstream)
    assert len(upstream.calls) == 4
    assert count(metrics, "schema", "output", "retry") == 2
    assert count(metrics, "schema", "output", "block") == 1


async def test_a_word_split_across_one_character_chunks_never_leaves() -> None:
    guardrails, checks, metrics, _ = setup()
    upstream = Upstream(FILLER + "we love acme!", piece=1)
    reply = await guardrails.guard(call("q", stream=True), [checks["words"]], upstream)
    text, blocked = await read(reply)
    assert blocked is not None
    assert blocked.check == "words"
    assert text
    assert FILLER.startswith(text)
    assert count(metrics, "words", "output", "block") == 1
    clean = await guardrails.guard(call("q", stream=True), [checks["words"]], Upstream(FILLER))
    assert await read(clean) == (FILLER, None)
    assert count(metrics, "words", "output", "allow") == 1


async def test_a_held_stream_is_checked_whole_and_retried_before_the_first_byte() -> None:
    guardrails, checks, _, _ = setup()
    upstream = Upstream("nope", '{"a": 1}', piece=2)
    request = call("q", stream=True, response_format=FORMAT)
    reply = await guardrails.guard(request, [checks["schema"]], upstream)
    assert await read(reply) == ('{"a": 1}', None)
    upstream = Upstream("nope", "no", piece=2)
    with pytest.raises(GuardrailBlocked):
        await guardrails.guard(
            call("q", stream=True, response_format=FORMAT), [checks["schema"]], upstream
        )


async def test_a_check_at_the_end_of_a_stream_blocks_in_place_of_its_end() -> None:
    guardrails, checks, metrics, _ = setup()
    upstream = Upstream(FILLER, piece=20)
    request = call("q", stream=True, response_format=FORMAT)
    reply = await guardrails.guard(request, [checks["schema-end"]], upstream)
    text, blocked = await read(reply)
    assert blocked is not None
    assert blocked.check == "schema-end"
    assert FILLER.startswith(text)
    assert text
    assert count(metrics, "schema-end", "output", "block") == 1


async def test_a_stream_closed_early_still_reports_its_verdicts() -> None:
    guardrails, checks, _, logger = setup()
    upstream = Upstream(FILLER * 3, piece=10)
    reply = await guardrails.guard(call("the nightjar", stream=True), [checks["noted"]], upstream)
    assert reply.stream is not None
    first = await anext(aiter(reply.stream))
    assert first.choices[0].delta.content == FILLER[:10]
    assert logger.lines == []  # the answer is not over yet
    await reply.stream.aclose()
    assert logger.lines == [
        (
            "guardrail_verdicts",
            {
                "request_id": "r",
                "verdicts": [{"check": "noted", "phase": "input", "verdict": "warn"}],
            },
        )
    ]


def _frames(texts: list[str]) -> RawFrames:
    frames = b"".join(
        b"data: "
        + json.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            }
        ).encode()
        + b"\n\n"
        for text in texts
    )
    return RawFrames(frames, msgspec.json.Decoder(Chunk).decode)


async def _frame_reads(text: str) -> AsyncIterator[Chunk | RawFrames]:
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    for start in range(0, len(pieces), 5):
        yield _frames(pieces[start : start + 5])
    yield Chunk(id="c", model="m", choices=[ChunkChoice(index=0, finish_reason="stop")])


class FrameUpstream:
    """Streams ``text`` as verbatim frames, five 3-character pieces a read."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def __call__(self, call: Call) -> Reply:
        return Reply(provider="p", model="m", stream=_frame_reads(self.text))  # type: ignore[arg-type]


async def test_verbatim_frames_go_out_verbatim_and_a_split_word_is_caught() -> None:
    guardrails, checks, _, _ = setup()
    reply = await guardrails.guard(call("q", stream=True), [checks["words"]], FrameUpstream(FILLER))
    assert reply.stream is not None
    items: list[Any] = []
    while batch := await reply.stream.next_batch(True):  # type: ignore[attr-defined]
        items += batch
    assert all(type(item) is RawFrames for item in items[:-1])  # as they came
    blocked = await guardrails.guard(
        call("q", stream=True), [checks["words"]], FrameUpstream(FILLER + "an acme tool")
    )
    assert blocked.stream is not None
    sent, failure = await _read_raw(blocked)
    assert isinstance(failure, GuardrailBlocked)
    text = "".join(
        chunk.choices[0].delta.content or ""
        for frames in sent
        for chunk in map(frames.parse, frames.payloads())
    )
    assert text
    assert FILLER.startswith(text)


async def _read_raw(reply: Reply) -> tuple[list[Any], Exception | None]:
    """What a raw reader got, and the failure that ended it."""
    sent: list[Any] = []
    try:
        while batch := await reply.stream.next_batch(True):  # type: ignore[union-attr]
            sent += batch
    except GuardrailBlocked as blocked:
        return sent, blocked
    return sent, None
