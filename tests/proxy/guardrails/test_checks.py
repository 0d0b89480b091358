"""The built-in checks on texts and calls, the registry's build errors, and the texts a check
reads and gets back from a webhook."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.canonical import (
    Call,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    ImageURL,
    Message,
    Params,
    TextPart,
    Tool,
    ToolCall,
)
from proxy.core.reply import Choice, Response
from proxy.guardrails.checks import Check, PiiRedaction, build_checks
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import parse_checks
from proxy.guardrails.texts import input_texts, output_texts, replace_input, replace_output
from proxy.providers.mock.provider import MockConfig, MockProvider

SECRET = "sk-proj-" + "abc123DEF456ghi789JKL012mno345"


def checks(section: dict[str, Any], providers: dict[str, Any] | None = None) -> dict[str, Check]:
    errors: list[str] = []
    configs = parse_checks(section, "$.guardrails", errors)
    assert errors == []
    return build_checks(configs, providers or {}, Clients())


def call(*texts: str, **params: Any) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content=text) for text in texts],
        params=Params(**params),
    )


def answer(content: str, tool_calls: list[ToolCall] | None = None) -> Response:
    message = Message(role="assistant", content=content)
    if tool_calls:
        message = Message(role="assistant", content=None, tool_calls=tool_calls)
    return Response(id="a", model="m", choices=[Choice(index=0, message=message)])


async def flagged(check: Check, request: Call, response: Response | None = None) -> bool:
    texts = input_texts(request) if response is None else output_texts(response)
    phase = "input" if response is None else "output"
    finding = await check.inspect(texts, request, phase)
    assert not finding.failed
    return finding.flagged


async def test_text_checks_flag_and_pass() -> None:
    built = checks(
        {
            "words": {"type": "keywords", "words": ["acme", "Globex"]},
            "secrets": {"type": "secrets"},
            "cards": {"type": "pii", "entities": ["credit_card"]},
            "every-pii": {"type": "pii"},
            "deny": {"type": "regex", "pattern": "INTERNAL-[0-9]{4}"},
            "require": {"type": "regex", "pattern": "TICKET-[0-9]+", "mode": "require"},
        }
    )
    assert await flagged(built["words"], call("we like GLOBEX"))
    assert not await flagged(built["words"], call("acmes are birds"))  # whole words only
    assert await flagged(built["secrets"], call("key", f"mine is {SECRET}"))
    assert not await flagged(built["secrets"], call("no key here"))
    assert await flagged(built["cards"], call("pay with 4111 1111 1111 1111"))
    assert not await flagged(built["cards"], call("write to jane@example.com"))
    assert await flagged(built["every-pii"], call("write to jane@example.com"))
    assert await flagged(built["deny"], call("see INTERNAL-1234"))
    assert not await flagged(built["require"], call("about TICKET-7"))
    assert await flagged(built["require"], call("no ticket"))
    for name in ("words", "secrets", "cards", "deny"):
        assert built[name].finder is not None  # windowed on streams
    assert built["require"].finder is None  # needs the whole answer


async def test_max_tokens_in_counts_the_estimated_prompt() -> None:
    check = checks({"small": {"type": "max_tokens_in", "max": 50}})["small"]
    assert not await flagged(check, call("a short prompt"))
    assert await flagged(check, call("word " * 100))


SCHEMA = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}


async def test_json_schema_against_the_request_s_format_and_tools() -> None:
    check = checks({"schema": {"type": "json_schema"}})["schema"]
    with_format = call(
        "q", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    )
    assert not await flagged(check, with_format, answer('{"a": 1}'))
    assert await flagged(check, with_format, answer('{"a": "one"}'))
    assert await flagged(check, with_format, answer("not json"))
    json_object = call("q", response_format={"type": "json_object"})
    assert not await flagged(check, json_object, answer("{}"))
    assert await flagged(check, json_object, answer("[1]"))
    assert not await flagged(check, call("q"), answer("free text"))  # nothing to validate against
    tool = Tool(function=FunctionDefinition(name="f", parameters=SCHEMA))
    with_tools = call("q", tools=[tool])
    good = ToolCall(id="1", function=FunctionCall(name="f", arguments='{"a": 2}'))
    bad = ToolCall(id="2", function=FunctionCall(name="f", arguments='{"b": 2}'))
    assert not await flagged(check, with_tools, answer("", [good]))
    assert await flagged(check, with_tools, answer("", [good, bad]))


async def test_json_schema_of_its_own() -> None:
    check = checks({"s": {"type": "json_schema", "schema": SCHEMA}})["s"]
    assert await flagged(check, call("q"), answer('{"b": 1}'))
    with pytest.raises(ValueError, match=r"guardrails\.bad: schema is not a valid JSON schema"):
        checks({"bad": {"type": "json_schema", "schema": {"type": 12}}})


def test_the_registry_refuses_what_cannot_be_built() -> None:
    with pytest.raises(ValueError, match=r"guardrails.re: pattern '\(' is not a valid"):
        checks({"re": {"type": "regex", "pattern": "("}})
    with pytest.raises(ValueError, match="'absent' of the config serves no moderations"):
        checks({"mod": {"type": "moderation", "provider": "absent"}})


async def test_moderation_asks_the_providers_moderation_capability() -> None:
    # The mock answers moderations in-process: a category is flagged when its name is a word.
    mock = MockProvider("mock", MockConfig())
    section = {"type": "moderation", "provider": "mock", "categories": ["harassment"]}
    check = checks({"mod": section}, {"mock": mock})["mod"]
    assert await flagged(check, call("a harassment of sorts"))
    assert not await flagged(check, call("hate speech"))  # a category it does not watch
    assert not await flagged(check, call("good morning"))


async def test_orq_redaction_replaces_values_with_labels() -> None:
    check = PiiRedaction(["email", "ip_address"])
    request = call("mail jane@example.com from 10.1.2.3", "nothing here")
    finding = await check.inspect(input_texts(request), request, "input")
    assert finding.replacement == ["mail <EMAIL_ADDRESS> from <IP_ADDRESS>", "nothing here"]
    clean = call("nothing here")
    assert (await check.inspect(input_texts(clean), clean, "input")).replacement is None


def test_texts_go_back_where_they_came_from() -> None:
    image = ImagePart(image_url=ImageURL(url="https://example.com/a.png"))
    request = Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[
            Message(role="system", content="be kind"),
            Message(role="user", content=[TextPart(text="look "), image, TextPart(text="here")]),
            Message(
                role="assistant",
                content=None,
                tool_calls=[ToolCall(id="1", function=FunctionCall(name="f", arguments="{}"))],
            ),
        ],
    )
    texts = input_texts(request)
    assert texts.texts == ["be kind", "look here", "{}"]
    replace_input(request, texts, ["BE KIND", "LOOK", '{"x": 1}'])
    assert request.messages[0].content == "BE KIND"
    assert request.messages[1].content == [TextPart(text="LOOK"), image]
    assert request.messages[2].tool_calls[0].function.arguments == '{"x": 1}'  # type: ignore[index]
    response = answer("hello")
    response.keep_raw(b'{"id": "a"}')
    out = output_texts(response)
    changed = replace_output(response, out, ["bye"])
    assert changed.choices[0].message.content == "bye"
    assert changed.raw is None
    assert response.choices[0].message.content == "hello"  # a copy: the original is shared
