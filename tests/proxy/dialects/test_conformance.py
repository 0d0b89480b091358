"""The dialect conformance suite, parametrised over the dialect registry.

For every dialect in :func:`proxy.dialects.all_dialects`, through the HTTP server against the
offline mock provider: a text answer and a tool call, whole and streamed; upstream failures before
the first byte (the dialect's error shape, the gateway's status) and after it (an in-band error,
no end marker); malformed JSON; the dialect's own bad requests (status, shape, a message naming
the field). Every response, stream event and error is validated against the dialect's schema by
its adapter (``tests/proxy/dialects/adapters``). A registered dialect without an adapter fails.

Then a property test: one canonical reply, rendered by every dialect's encoders, whole and as a
stream split at arbitrary points, reads back as the same text, tool calls and token counts.
"""

from __future__ import annotations

import itertools
import json
import string
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from proxy.core.canonical import FunctionCall, Message, ToolCall, Usage
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    Reply,
    Response,
    ToolCallDelta,
)
from proxy.dialects import all_dialects
from proxy.dialects.base import Dialect
from tests.proxy.dialects.adapters import (
    DialectAdapter,
    ErrorCase,
    Outcome,
    ToolCallOut,
    load_adapters,
)
from tests.proxy.dialects.adapters.gateway import post, serve

DIALECTS = {dialect.name: dialect for dialect in all_dialects()}
ADAPTERS = load_adapters()
TEXT = "conformance says hello"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CALL = ToolCallOut("get_weather", {"city": TEXT, "days": 1})
WITH_TOOLS = [name for name in DIALECTS if name in ADAPTERS and ADAPTERS[name].supports_tools]


def adapter_for(dialect: str) -> DialectAdapter:
    """The dialect's adapter; a missing one fails the test rather than skipping the dialect."""
    adapter = ADAPTERS.get(dialect)
    if adapter is None:
        pytest.fail(
            f"dialect {dialect!r} has no conformance adapter: add a module defining ADAPTER "
            "to tests/proxy/dialects/adapters (see its package docstring)"
        )
    return adapter


def error_cases() -> list[Any]:
    return [
        pytest.param(name, case, id=f"{name}-{case.id}")
        for name in DIALECTS
        if name in ADAPTERS
        for case in ADAPTERS[name].error_cases()
    ]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path) as url:
        yield url


async def ask(gateway: str, dialect: str, model: str, *, stream: bool, tools: Any = None):
    adapter = adapter_for(dialect)
    path, body = adapter.request(model, TEXT, stream=stream, tools=tools)
    assert path in DIALECTS[dialect].paths
    return adapter, await post(gateway, path, body)


def test_every_registered_dialect_has_an_adapter() -> None:
    missing = sorted(set(DIALECTS) - set(ADAPTERS))
    assert not missing, f"dialects without a conformance adapter: {missing}"
    unknown = sorted(set(ADAPTERS) - set(DIALECTS))
    assert not unknown, f"adapters for dialects that are not registered: {unknown}"


def test_a_dialect_without_an_adapter_fails_rather_than_skips() -> None:
    with pytest.raises(pytest.fail.Exception, match="no conformance adapter"):
        adapter_for("no-such-dialect")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_text_whole_and_streamed_say_the_same(gateway: str, dialect: str) -> None:
    adapter, whole = await ask(gateway, dialect, "openai/echo", stream=False)
    assert whole.status == 200, whole.body
    assert whole.headers["content-type"].startswith("application/json")
    assert whole.headers["x-crossway-provider"] == "openai"
    expected = Outcome(TEXT, input_tokens=4, output_tokens=3)  # mock: a token per word (+1/turn)
    assert adapter.read_response(whole.json()) == expected

    _, streamed = await ask(gateway, dialect, "openai/echo", stream=True)
    assert streamed.status == 200, streamed.body
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert adapter.read_stream(streamed.body) == expected


@pytest.mark.parametrize("dialect", WITH_TOOLS)
async def test_tool_call_whole_and_streamed_say_the_same(gateway: str, dialect: str) -> None:
    adapter, whole = await ask(gateway, dialect, "openai/tools", stream=False, tools=TOOLS)
    assert whole.status == 200, whole.body
    outcome = adapter.read_response(whole.json())
    assert outcome.tool_calls == (TOOL_CALL,)
    assert outcome.text == ""
    assert outcome.output_tokens

    _, streamed = await ask(gateway, dialect, "openai/tools", stream=True, tools=TOOLS)
    assert streamed.status == 200, streamed.body
    assert adapter.read_stream(streamed.body) == outcome


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("model", "status"),
    [
        ("openai/error-400", 400),
        ("openai/error-429", 429),
        ("openai/error-500", 502),
        ("openai/error-503", 503),
        ("nowhere/model", 404),
    ],
)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_failure_before_the_first_byte_is_an_error_in_the_dialects_shape(
    gateway: str, dialect: str, model: str, status: int, stream: bool
) -> None:
    adapter, answer = await ask(gateway, dialect, model, stream=stream)
    if dialect == "fabro" and model == "openai/error-503":
        status = 502  # Fabro answers every upstream LLM failure with 502
    assert answer.status == status, answer.body
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["x-request-id"]
    assert adapter.read_error(status, answer.json())
    if status == 429:
        assert answer.headers["retry-after"] == "1"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_failure_mid_stream_is_an_in_band_error_without_end_marker(
    gateway: str, dialect: str
) -> None:
    adapter, answer = await ask(gateway, dialect, "openai/cut-3", stream=True)
    assert answer.status == 200
    outcome = adapter.read_stream(answer.body)
    assert outcome.error
    assert outcome.text == "This is"  # the mock's fixed reply, cut after 3 chunks


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_malformed_json_is_a_400_in_the_dialects_shape(gateway: str, dialect: str) -> None:
    adapter = adapter_for(dialect)
    path, _ = adapter.request("openai/echo", TEXT, stream=False)
    answer = await post(gateway, path, b'{"model": "openai/echo", ')
    assert answer.status == 400
    assert adapter.read_error(400, answer.json())


@pytest.mark.parametrize(("dialect", "case"), error_cases())
async def test_bad_request_names_the_field(gateway: str, dialect: str, case: ErrorCase) -> None:
    adapter = adapter_for(dialect)
    path, _ = adapter.request("openai/echo", TEXT, stream=False)
    answer = await post(gateway, path, case.body)
    assert answer.status == case.status, answer.body
    message = adapter.read_error(case.status, answer.json())
    assert case.field.lower() in message.lower(), message
    if case.message is not None:
        assert message == case.message


# ---------------------------------------------------------------------------------------------
# One canonical reply, every dialect's encoders
# ---------------------------------------------------------------------------------------------

_COUNTS = st.integers(min_value=0, max_value=1_000_000)
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=12)
)
_ARGUMENTS = st.dictionaries(
    st.text(string.ascii_letters, min_size=1, max_size=6), _JSON_VALUES, max_size=3
)


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at arbitrary points (no empty pieces)."""
    cuts = sorted(set(draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=5))))
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@st.composite
def canonical_replies(draw: st.DrawFn) -> tuple[Response, list[Chunk], Outcome]:
    """A whole response, the chunk stream that says the same, and what a client must read."""
    text = draw(st.text(max_size=60))
    calls = [
        ToolCall(id=f"call_{i}", function=FunctionCall(name=name, arguments=json.dumps(args)))
        for i, (name, args) in enumerate(draw(st.lists(st.tuples(_NAMES, _ARGUMENTS), max_size=2)))
    ]
    usage = Usage(
        input=draw(_COUNTS),
        cache_read=draw(_COUNTS),
        cache_write=draw(_COUNTS),
        output=draw(_COUNTS),
        reasoning=draw(_COUNTS),
    )
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length"]))
    message = Message(
        role="assistant",
        content=text if text or not calls else None,
        tool_calls=calls or UNSET,
    )
    response = Response(
        id="cmpl-prop",
        model="m",
        created=1_700_000_000,
        choices=[Choice(index=0, message=message, finish_reason=finish)],
        usage=usage,
    )
    deltas = [Delta(role="assistant", content="")]
    deltas += [Delta(content=piece) for piece in _pieces(draw, text)]
    for index, call in enumerate(calls):
        head = FunctionCallDelta(name=call.function.name, arguments="")
        deltas.append(
            Delta(
                tool_calls=[ToolCallDelta(index=index, id=call.id, type="function", function=head)]
            )
        )
        deltas += [
            Delta(tool_calls=[ToolCallDelta(index=index, function=FunctionCallDelta(arguments=a))])
            for a in _pieces(draw, call.function.arguments)
        ]
    chunks = [
        Chunk(id="cmpl-prop", model="m", created=1_700_000_000, choices=[ChunkChoice(0, d)])
        for d in deltas
    ]
    chunks.append(
        Chunk(
            id="cmpl-prop",
            model="m",
            created=1_700_000_000,
            choices=[ChunkChoice(0, Delta(), finish_reason=finish)],
        )
    )
    chunks.append(Chunk(id="cmpl-prop", model="m", created=1_700_000_000, choices=[], usage=usage))
    expected = Outcome(
        text=text,
        tool_calls=tuple(
            ToolCallOut(c.function.name, json.loads(c.function.arguments)) for c in calls
        ),
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
    )
    return response, chunks, expected


async def _unused() -> AsyncIterator[Chunk]:
    """Stands for the upstream stream in a Reply; encoders only read chunks they are given."""
    yield Chunk(id="unused", model="m", choices=[])


def _render(dialect: Dialect, adapter: DialectAdapter, response: Response, chunks: list[Chunk]):
    _, body = adapter.request("openai/m", "hi", stream=False)
    call = dialect.decode(json.dumps(body).encode(), {}, "req-prop", time.perf_counter())
    whole = adapter.read_response(
        json.loads(dialect.encode_response(call, Reply("openai", "m", response=response)))
    )
    _, body = adapter.request("openai/m", "hi", stream=True)
    call = dialect.decode(json.dumps(body).encode(), {}, "req-prop", time.perf_counter())
    encoder = dialect.stream_encoder(call, Reply("openai", "m", stream=_unused()))
    raw = b"".join(encoder.chunk(chunk) for chunk in chunks) + encoder.end()
    return whole, adapter.read_stream(raw)


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(reply=canonical_replies())
def test_every_encoder_says_the_same_as_the_canonical_reply(
    dialect: str, reply: tuple[Response, list[Chunk], Outcome]
) -> None:
    response, chunks, expected = reply
    adapter = adapter_for(dialect)
    if not adapter.supports_tools:
        expected = Outcome(
            expected.text,
            input_tokens=expected.input_tokens,
            output_tokens=expected.output_tokens,
        )
    whole, streamed = _render(DIALECTS[dialect], adapter, response, chunks)
    assert whole == expected
    assert streamed == expected
