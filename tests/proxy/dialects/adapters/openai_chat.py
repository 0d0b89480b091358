"""Conformance adapter for OpenAI chat completions (``proxy.dialects.openai_chat``)."""

from __future__ import annotations

from typing import Any

from tests.proxy.dialects.adapters import (
    ErrorCase,
    OpenAIDeltaAssembler,
    Outcome,
    data_payloads,
    openai_tool_calls,
    openai_usage,
)
from tests.schemas import validate

HELLO = [{"role": "user", "content": "hello"}]


class OpenAIChatAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "openai"
    supports_tools = True

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": text}],
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        return "/v1/chat/completions", body

    def read_response(self, body: dict[str, Any]) -> Outcome:
        validate("CreateChatCompletionResponse", body)
        message = body["choices"][0]["message"]
        prompt, completion = openai_usage(body.get("usage"))
        return Outcome(
            text=message.get("content") or "",
            tool_calls=openai_tool_calls(message.get("tool_calls")),
            input_tokens=prompt,
            output_tokens=completion,
        )

    def read_stream(self, raw: bytes) -> Outcome:
        payloads, error = data_payloads(raw)
        assembler = OpenAIDeltaAssembler()
        usage = None
        for payload in payloads:
            validate("CreateChatCompletionStreamResponse", payload)
            assert payload["object"] == "chat.completion.chunk"
            for choice in payload["choices"]:
                assembler.add(choice["delta"])
            usage = payload.get("usage") or usage
        prompt, completion = openai_usage(usage)
        return Outcome(
            text="".join(assembler.text),
            tool_calls=assembler.tool_calls(),
            input_tokens=prompt,
            output_tokens=completion,
            error=self.read_error(200, error) if error is not None else None,
        )

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        validate("ErrorResponse", body)
        return body["error"]["message"]

    def error_cases(self) -> list[ErrorCase]:
        model = "openai/echo"
        return [
            ErrorCase("missing-model", {"messages": HELLO}, "model"),
            ErrorCase("empty-model", {"model": "", "messages": HELLO}, "model"),
            ErrorCase("missing-messages", {"model": model}, "messages"),
            ErrorCase("empty-messages", {"model": model, "messages": []}, "messages"),
            ErrorCase("messages-wrong-type", {"model": model, "messages": "hi"}, "messages"),
            ErrorCase(
                "temperature-out-of-range",
                {"model": model, "messages": HELLO, "temperature": 3},
                "temperature",
            ),
            ErrorCase(
                "max-tokens-wrong-type",
                {"model": model, "messages": HELLO, "max_tokens": "many"},
                "max_tokens",
            ),
            ErrorCase(
                "fallbacks-not-a-list",
                {"model": model, "messages": HELLO, "fallbacks": "anthropic/claude"},
                "fallbacks",
            ),
            ErrorCase(
                "fallback-empty",
                {"model": model, "messages": HELLO, "fallbacks": [""]},
                "fallbacks",
            ),
        ]


ADAPTER = OpenAIChatAdapter()
