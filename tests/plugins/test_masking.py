"""The masking plugin as a link of the chain: what the next link receives, what the client gets
back, blocking, the failure policy, per-request (orq) controls, metrics and logs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from plugins.masking import MaskingConfig, MaskingPlugin
from proxy.core.canonical import (
    Call,
    FunctionCall,
    GatewayOptions,
    MediaRequest,
    Message,
    TextPart,
    ToolCall,
)
from proxy.core.errors import BadRequest, GatewayError, InternalError, UpstreamClientError
from proxy.core.metrics import Metrics
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, MediaAnswer, Reply, Response
from proxy.pii.text import TextView
from proxy.runtime.plugins import PluginContext

EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"


class Echo:
    """The next link: records the call and echoes the last user text (whole or in chunks)."""

    def __init__(self, pieces: list[str] | None = None, error: GatewayError | None = None):
        self.calls: list[Call] = []
        self.pieces = pieces
        self.error = error

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(msgspec.structs.replace(call, messages=list(call.messages)))
        if self.error is not None:
            raise self.error
        text = call.messages[-1].text()
        if not call.stream:
            message = Message(role="assistant", content=text)
            response = Response(id="r", model="m", choices=[Choice(index=0, message=message)])
            return Reply(provider="p", model="m", response=response)
        pieces = self.pieces or [text]
        return Reply(provider="p", model="m", stream=_chunks(pieces))


async def _chunks(pieces: list[str]) -> AsyncIterator[Chunk]:
    for piece in pieces:
        yield Chunk(id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=piece))])
    yield Chunk(id="c", model="m", choices=[ChunkChoice(index=0, finish_reason="stop")])


def plugin(metrics: Metrics | None = None, **options: Any) -> MaskingPlugin:
    context = PluginContext(lambda *a, **k: [], metrics or Metrics(), _Logger())
    return MaskingPlugin(msgspec.convert(options, MaskingConfig), context)


class _Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    error = info


def call_of(*messages: Message, stream: bool = False, **options: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="m",
        messages=list(messages),
        stream=stream,
        options=GatewayOptions(**options),
    )


def user(text: str) -> Message:
    return Message(role="user", content=text)


async def test_the_next_link_gets_placeholders_and_the_client_gets_values_back() -> None:
    echo = Echo()
    reply = await plugin(entities={"email": "mask"})(
        call_of(user(f"mail {EMAIL} or {EMAIL}")), echo
    )
    assert echo.calls[0].messages[-1].content == "mail <EMAIL_1> or <EMAIL_1>"
    assert reply.response is not None
    assert reply.response.choices[0].message.content == f"mail {EMAIL} or {EMAIL}"


async def test_a_streamed_reply_is_restored_with_the_placeholder_split() -> None:
    echo = Echo(pieces=["to <EMA", "IL_1", ">!"])
    reply = await plugin(entities={"email": "mask"})(call_of(user(EMAIL), stream=True), echo)
    assert reply.stream is not None
    texts = [c.choices[0].delta.content async for c in reply.stream if c.choices]
    assert "".join(t or "" for t in texts) == f"to {EMAIL}!"
    assert not any(t and "<" in t for t in texts)


async def test_redact_is_irreversible_and_hash_is_stable() -> None:
    masking = plugin(entities={"email": "redact", "phone": "hash"}, hash_key="0123456789abcdef-key")
    first, second = Echo(), Echo()
    await masking(call_of(user(f"{EMAIL} +44 20 7946 0958")), first)
    await masking(call_of(user("call +44 20 7946 0958")), second)
    sent = first.calls[0].messages[-1].content
    assert isinstance(sent, str)
    assert sent.startswith("<EMAIL> <PHONE_HASH_")
    assert sent.split()[-1] == str(second.calls[0].messages[-1].content).split()[-1]


async def test_block_refuses_without_calling_the_next_link_and_names_no_value() -> None:
    echo = Echo()
    with pytest.raises(BadRequest) as refused:
        await plugin(entities={"credit_card": "block", "email": "block"})(
            call_of(user(f"{CARD} and {EMAIL}")), echo
        )
    assert refused.value.code == "pii_blocked"
    assert "credit_card" in refused.value.message
    assert "email" in refused.value.message
    assert CARD not in refused.value.message
    assert EMAIL not in refused.value.message
    assert echo.calls == []


async def test_roles_parts_tool_arguments_and_tool_results_are_scanned_images_are_not() -> None:
    echo = Echo()
    arguments = json.dumps({"to": EMAIL, "n": 1})
    messages = [
        Message(role="system", content=f"admin is {EMAIL}"),
        Message(role="user", content=[TextPart(text=f"me: {EMAIL}")]),
        Message(
            role="assistant",
            content=None,
            tool_calls=[ToolCall(id="t", function=FunctionCall(name="send", arguments=arguments))],
        ),
        Message(role="tool", content=f"sent to {EMAIL}", tool_call_id="t"),
        user("thanks"),
    ]
    await plugin(entities={"email": "mask"}, roles=["system", "user", "tool", "assistant"])(
        call_of(*messages), echo
    )
    sent = echo.calls[0].messages
    assert sent[0].content == "admin is <EMAIL_1>"
    assert sent[1].content == [TextPart(text="me: <EMAIL_1>")]
    assert json.loads(sent[2].tool_calls[0].function.arguments) == {"to": "<EMAIL_1>", "n": 1}  # type: ignore[index]
    assert sent[3].content == "sent to <EMAIL_1>"


async def test_a_value_found_elsewhere_is_also_replaced_in_unscanned_roles() -> None:
    echo = Echo()
    history = [user(f"I am {EMAIL}"), Message(role="assistant", content=f"Hi {EMAIL}!"), user("ok")]
    await plugin(entities={"email": "mask"})(call_of(*history), echo)
    assert echo.calls[0].messages[1].content == "Hi <EMAIL_1>!"


async def test_a_literal_placeholder_in_the_prompt_is_never_restored_into_a_value() -> None:
    echo = Echo()
    reply = await plugin(entities={"email": "mask"})(
        call_of(user(f"template <EMAIL_1>, real {EMAIL}")), echo
    )
    assert echo.calls[0].messages[-1].content == "template <EMAIL_1>, real <EMAIL_2>"
    assert reply.response is not None
    assert reply.response.choices[0].message.content == f"template <EMAIL_1>, real {EMAIL}"


async def test_output_scan_redacts_what_the_model_writes_and_none_keeps_placeholders() -> None:
    scanning = plugin(entities={"email": "mask"}, output="scan")
    stream_reply = await scanning(
        call_of(user(EMAIL), stream=True), Echo(pieces=["<EMAIL_1> and boss@", "corp.example.com"])
    )
    assert stream_reply.stream is not None
    text = "".join(
        [c.choices[0].delta.content or "" async for c in stream_reply.stream if c.choices]
    )
    assert text == f"{EMAIL} and <EMAIL>"
    kept = await plugin(entities={"email": "mask"}, output="none")(call_of(user(EMAIL)), Echo())
    assert kept.response is not None
    assert kept.response.choices[0].message.content == "<EMAIL_1>"


async def test_custom_patterns_and_word_lists() -> None:
    echo = Echo()
    masking = plugin(
        custom=[
            {"name": "employee_id", "pattern": "EMP-[0-9]{6}", "action": "mask"},
            {"name": "project", "words": ["bluebird", "night jar"], "action": "redact"},
        ]
    )
    reply = await masking(
        call_of(user("EMP-004217 on Bluebird and NIGHT JAR, not bluebirds")), echo
    )
    assert echo.calls[0].messages[-1].content == (
        "<EMPLOYEE_ID_1> on <PROJECT> and <PROJECT>, not bluebirds"
    )
    assert reply.response is not None
    assert reply.response.choices[0].message.content.startswith("EMP-004217 on <PROJECT>")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "options",
    [
        {"custom": [{"name": "email", "words": ["x"]}]},
        {"custom": [{"name": "x", "pattern": "a", "words": ["b"]}]},
        {"custom": [{"name": "x"}]},
        {"custom": [{"name": "x", "pattern": "("}]},
        {"custom": [{"name": "x", "pattern": "a*"}]},
        {"entities": {"email": "hash"}},
    ],
)
def test_bad_options_are_refused_at_load(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each message names its own problem
        plugin(**options)


def failing(view: TextView) -> list[tuple[int, int]]:
    raise RuntimeError("detector bug")


async def test_a_detector_error_fails_closed_by_default() -> None:
    context = PluginContext(lambda *a, **k: [], Metrics(), _Logger())
    masking = MaskingPlugin(
        msgspec.convert({"entities": {"email": "mask"}}, MaskingConfig),
        context,
        finders={"email": failing},
    )
    echo = Echo()
    with pytest.raises(InternalError) as failed:
        await masking(call_of(user(EMAIL)), echo)
    assert failed.value.code == "pii_detection_failed"
    assert echo.calls == []
    assert context.logger.lines == [
        ("pii_detection_failed", {"request_id": "req-1", "error": "RuntimeError", "blocked": True})
    ]


async def test_passthrough_sends_unmasked_unless_the_request_asks_to_block() -> None:
    options = msgspec.convert(
        {"entities": {"email": "mask"}, "on_error": "passthrough"}, MaskingConfig
    )
    context = PluginContext(lambda *a, **k: [], Metrics(), _Logger())
    masking = MaskingPlugin(options, context, finders={"email": failing})
    echo = Echo()
    await masking(call_of(user(EMAIL)), echo)
    assert echo.calls[0].messages[-1].content == EMAIL
    with pytest.raises(InternalError):
        await masking(call_of(user(EMAIL), pii=[{"id": "pii_redaction", "entities": None}]), echo)


async def test_orq_per_request_entities_add_masking_with_orq_labels() -> None:
    echo = Echo()
    request = call_of(
        user(f"{EMAIL}, +44 20 7946 0958"),
        pii=[{"id": "pii_redaction", "entities": ["EMAIL_ADDRESS"], "on_failure": "block"}],
    )
    reply = await plugin(entities={"phone": "redact"})(request, echo)
    assert echo.calls[0].messages[-1].content == "<EMAIL_ADDRESS_1>, <PHONE>"
    assert reply.response is not None
    assert reply.response.choices[0].message.content == f"{EMAIL}, <PHONE>"


async def test_orq_cannot_remove_masking_nor_weaken_an_action() -> None:
    echo = Echo()
    request = call_of(
        user(CARD),
        pii=[{"id": "pii_redaction", "entities": ["credit_card"], "on_failure": "passthrough"}],
    )
    with pytest.raises(BadRequest):
        await plugin(entities={"credit_card": "block"})(request, echo)
    masked = await plugin(entities={"email": "mask"})(
        call_of(user(EMAIL), mask=frozenset({"all"})), echo
    )
    assert echo.calls[-1].messages[-1].content == "<EMAIL_1>"  # security.mask does not unmask
    assert masked.response is not None


async def test_an_entity_the_gateway_cannot_detect_is_a_400_unless_passthrough() -> None:
    entry = {"id": "pii_redaction", "entities": ["EMAIL_ADDRESS", "PERSON"], "on_failure": "block"}
    with pytest.raises(BadRequest) as refused:
        await plugin()(call_of(user("x"), pii=[entry]), Echo())
    assert refused.value.code == "pii_entity_unsupported"
    assert refused.value.param == "plugins[0].entities[1]"
    echo = Echo()
    await plugin()(call_of(user(EMAIL), pii=[{**entry, "on_failure": "passthrough"}]), echo)
    assert echo.calls[0].messages[-1].content == "<EMAIL_ADDRESS_1>"


async def test_security_mask_redacts_an_upstream_error_that_echoes_the_input() -> None:
    error = UpstreamClientError(f"bad input: {EMAIL}", upstream_status=400)
    with pytest.raises(UpstreamClientError) as raised:
        await plugin()(call_of(user(EMAIL), mask=frozenset({"input"})), Echo(error=error))
    assert raised.value.message == "bad input: <EMAIL>"
    plain = UpstreamClientError(f"bad input: {EMAIL}", upstream_status=400)
    with pytest.raises(UpstreamClientError) as untouched:
        await plugin()(call_of(user(EMAIL)), Echo(error=plain))
    assert untouched.value.message == f"bad input: {EMAIL}"


async def test_detections_are_counted_and_logged_without_values() -> None:
    metrics = Metrics()
    masking = plugin(metrics, entities={"email": "mask", "phone": "redact"})
    await masking(call_of(user(f"{EMAIL} {EMAIL} +44 20 7946 0958")), Echo())
    rendered = metrics.render().decode()
    assert 'crossway_pii_detections_total{action="mask",entity="email"} 2.0' in rendered
    assert 'crossway_pii_detections_total{action="redact",entity="phone"} 1.0' in rendered
    logger = masking._logger  # type: ignore[attr-defined]
    assert logger.lines == [
        ("pii_detected", {"request_id": "req-1", "entities": {"email": 2, "phone": 1}})
    ]
    assert EMAIL not in repr(logger.lines)


async def test_without_anything_to_look_for_the_call_passes_untouched() -> None:
    echo = Echo()
    call = call_of(user(EMAIL))
    reply = await plugin()(call, echo)
    assert echo.calls[0].messages[-1].content == EMAIL
    assert reply.response is not None


# -- media calls -------------------------------------------------------------------------------


async def test_a_media_calls_texts_are_masked_where_they_are() -> None:
    seen: list[Call] = []

    async def media_next(call: Call) -> Reply:
        seen.append(call)
        return Reply(provider="p", model="m", media=MediaAnswer(b"{}", "application/json"))

    fields = {
        "query": f"mail {EMAIL}",
        "documents": ["plain", {"text": f"to {EMAIL}", "id": 7}, 3],
        "top_n": 2,
    }
    call = Call(
        request_id="r",
        dialect="rerank",
        model="m",
        messages=[],
        media=MediaRequest("rerank", fields),
    )
    masking = plugin(entities={"email": "mask"})
    reply = await masking(call, media_next)
    assert reply.media is not None
    [sent] = seen
    assert sent.media is not None
    masked = sent.media.fields
    assert EMAIL not in json.dumps(masked)
    assert masked["query"].startswith("mail ")
    assert masked["documents"][0] == "plain"
    assert masked["documents"][1]["id"] == 7
    assert masked["documents"][2] == 3
    assert masked["top_n"] == 2
    assert fields["query"] == f"mail {EMAIL}"  # the client's fields are left as they were


async def test_a_media_call_with_a_blocked_entity_is_refused() -> None:
    call = Call(
        request_id="r",
        dialect="openai_speech",
        model="m",
        messages=[],
        media=MediaRequest("speech", {"input": f"card {CARD}", "voice": "alloy"}),
    )
    with pytest.raises(BadRequest) as refused:
        await plugin(entities={"credit_card": "block"})(call, Echo())
    assert refused.value.code == "pii_blocked"


def test_scrub_is_the_output_scan_of_a_kept_answer_and_counts_nothing() -> None:
    metrics = Metrics()
    scanning = plugin(metrics, entities={"email": "mask"}, output="scan")
    assert scanning.scrub('{"content": "mail bob@example.com"}') == '{"content": "mail <EMAIL>"}'
    found = metrics.registry.get_sample_value(
        "crossway_pii_detections_total", {"entity": "email", "action": "redact_output"}
    )
    assert not found
    restoring = plugin(entities={"email": "mask"})
    assert restoring.scrub("mail bob@example.com") == "mail bob@example.com"
