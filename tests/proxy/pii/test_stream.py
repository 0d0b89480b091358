"""Rewriting reply streams: placeholders split across chunks and tool-argument fragments, text
switches, finishes, verbatim frames passed through or decoded, copies instead of mutation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from proxy.core.canonical import Message
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    RawFrames,
    Response,
    ToolCallDelta,
)
from proxy.pii.detectors import BUILTIN_FINDERS
from proxy.pii.restore import OutputRedactor, Rewriter
from proxy.pii.scanner import Scanner
from proxy.pii.stream import ChunkRewriter, RewritingStream
from proxy.pii.vault import Vault

VALUE = "jane@example.com"


def vault() -> Vault:
    v = Vault()
    v.placeholder("EMAIL", VALUE)
    return v


def text_chunk(text: str | None = None, finish: str | None = None, **delta: object) -> Chunk:
    return Chunk(
        id="c",
        model="m",
        choices=[ChunkChoice(index=0, delta=Delta(content=text, **delta), finish_reason=finish)],  # type: ignore[arg-type]
    )


def tool_chunk(index: int, arguments: str, name: str | None = None) -> Chunk:
    function = (
        FunctionCallDelta(arguments=arguments)
        if name is None
        else FunctionCallDelta(name=name, arguments=arguments)
    )
    fragment = (
        ToolCallDelta(index=index, id=f"call_{index}", function=function)
        if name
        else (ToolCallDelta(index=index, function=function))
    )
    return Chunk(
        id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(tool_calls=[fragment]))]
    )


def run(chunks: list[Chunk]) -> list[Chunk]:
    rewriter = ChunkRewriter(Rewriter(vault()))
    out: list[Chunk] = []
    for chunk in chunks:
        out.extend(rewriter.chunk(chunk))
    out.extend(rewriter.finish())
    return out


def contents(chunks: list[Chunk]) -> list[str]:
    return [c.choices[0].delta.content or "" for c in chunks if c.choices]  # type: ignore[misc]


def test_chunks_without_placeholders_pass_as_the_same_objects() -> None:
    chunks = [
        text_chunk("Hello", role="assistant"),
        text_chunk(" there"),
        text_chunk(finish="stop"),
    ]
    out = run(chunks)
    assert all(a is b for a, b in zip(out, chunks, strict=True))


def test_a_placeholder_split_across_chunks_comes_out_whole_in_one() -> None:
    source = [
        text_chunk("Mail <EM"),
        text_chunk("AIL_"),
        text_chunk("1> now"),
        text_chunk(finish="stop"),
    ]
    raw = source[0]
    raw.raw = b"{}"
    out = run(source)
    assert contents(out) == ["Mail ", "", f"{VALUE} now", ""]
    assert out[0].raw is None
    assert raw.choices[0].delta.content == "Mail <EM"


def test_held_text_goes_into_the_finishing_chunk() -> None:
    out = run([text_chunk("trailing <EMAIL_1"), text_chunk(None, finish="stop")])
    assert contents(out) == ["trailing ", "<EMAIL_1"]
    assert out[-1].choices[0].finish_reason == "stop"


def test_held_text_is_flushed_first_when_the_choice_switches_to_a_tool_call() -> None:
    out = run(
        [text_chunk("see <EMAIL_"), tool_chunk(0, '{"a"', name="f"), text_chunk(finish="stop")]
    )
    assert contents(out) == ["see ", "<EMAIL_", "", ""]  # the flush comes before the tool call
    assert out[2].choices[0].delta.tool_calls[0].function.arguments == '{"a"'  # type: ignore[index,union-attr]


def test_tool_arguments_split_across_fragments_are_restored_as_valid_json() -> None:
    out = run(
        [
            tool_chunk(0, "", name="send"),
            tool_chunk(0, '{"to": "<EMA'),
            tool_chunk(0, 'IL_1>", "cc": "\\u003cEM'),
            tool_chunk(0, 'AIL_1\\u003e"}'),
            text_chunk(finish="tool_calls"),
        ]
    )
    arguments = "".join(
        fragment.function.arguments  # type: ignore[union-attr,misc]
        for chunk in out
        for fragment in chunk.choices[0].delta.tool_calls or ()
    )
    assert json.loads(arguments) == {"to": VALUE, "cc": VALUE}
    assert out[0].choices[0].delta.tool_calls[0].function.name == "send"  # type: ignore[index,union-attr]


def test_text_still_held_when_the_stream_ends_without_a_finish_is_sent_last() -> None:
    out = run([text_chunk("bye <EMAIL_1")])
    assert "".join(contents(out)) == "bye <EMAIL_1"


class _Source:
    """A batched stream of prepared batches."""

    def __init__(self, batches: list[list[Chunk | RawFrames]]) -> None:
        self._batches = batches
        self.ended = False
        self.closed = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        assert raw, "the rewriting stream always asks for verbatim frames"
        if not self._batches:
            self.ended = True
            return []
        batch = self._batches.pop(0)
        self.ended = not self._batches
        return batch

    def __aiter__(self) -> AsyncIterator[Chunk]:
        raise AssertionError("read through next_batch")

    async def aclose(self) -> None:
        self.closed = True


def frames(*texts: str) -> RawFrames:
    data = b"".join(
        b"data: "
        + json.dumps(
            {
                "id": "c",
                "model": "m",
                "created": 1,
                "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}],
            }
        ).encode()
        + b"\n\n"
        for t in texts
    )

    def parse(payload: bytes) -> Chunk:
        body = json.loads(payload)
        return text_chunk(body["choices"][0]["delta"]["content"])

    return RawFrames(data, parse)


async def test_verbatim_frames_pass_unless_they_may_hold_a_placeholder() -> None:
    clean, dirty = frames("Hello", " world"), frames(" to <EMA", "IL_1>")
    source = _Source([[clean], [dirty], [text_chunk(finish="stop")]])
    stream = RewritingStream(source, ChunkRewriter(Rewriter(vault())))  # type: ignore[arg-type]
    first = await stream.next_batch(True)
    assert first == [clean]
    second = await stream.next_batch(True)
    assert [c.choices[0].delta.content for c in second] == [" to ", VALUE]  # type: ignore[union-attr]
    third = await stream.next_batch(True)
    assert stream.ended
    assert third[-1].choices[0].finish_reason == "stop"
    assert await stream.next_batch(True) == []
    await stream.aclose()
    assert source.closed


async def test_iteration_decodes_every_frame() -> None:
    source = _Source([[frames("a <EMAIL_1> b")], [text_chunk(finish="stop")]])
    stream = RewritingStream(source, ChunkRewriter(Rewriter(vault())))  # type: ignore[arg-type]
    texts = [chunk.choices[0].delta.content async for chunk in stream]
    assert texts == [f"a {VALUE} b", None]


def test_scanned_output_never_goes_out_as_the_upstream_s_bytes() -> None:
    scanner = Scanner(list(BUILTIN_FINDERS.items()))

    def redactor() -> OutputRedactor:
        return OutputRedactor(scanner, {"email": "EMAIL"}, lambda _: None, 64)

    rewriter = ChunkRewriter(Rewriter(None, redactor))
    chunk = text_chunk("nothing to redact here")
    chunk.raw = b'{"choices": [{"delta": {"content": "...", "audio": "unscanned"}}]}'
    assert all(out.raw is None for out in rewriter.chunk(chunk))
    response = Response(
        id="r",
        model="m",
        choices=[Choice(index=0, message=Message(role="assistant", content="plain"))],
    )
    response.keep_raw(b'{"unmodelled": "member"}')
    rewritten = Rewriter(None, redactor).response(response)
    assert rewritten.raw is None
    assert Rewriter(vault(), None).response(response).unchanged()  # restore keeps the body
