"""Conformance adapter for OpenAI legacy completions (``proxy.dialects.openai_completions``)."""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

from tests.proxy.dialects.adapters import ErrorCase, Outcome, data_payloads, openai_usage
from tests.schemas import OPENAI_SPEC, load_spec, validate, validate_schema


@functools.cache
def completion_chunk_schema() -> dict[str, Any]:
    """``CreateCompletionResponse`` as streamed: OpenAI sends the same shape for stream frames,
    except that ``finish_reason`` is null until the last one."""
    document = load_spec(OPENAI_SPEC)
    schema = copy.deepcopy(document["components"]["schemas"]["CreateCompletionResponse"])
    schema["properties"]["choices"]["items"]["properties"]["finish_reason"]["nullable"] = True
    return schema


def read_completion(body: dict[str, Any]) -> Outcome:
    """A whole ``text_completion`` validated against OpenAI's schema."""
    validate("CreateCompletionResponse", body)
    prompt, completion = openai_usage(body.get("usage"))
    return Outcome(text=body["choices"][0]["text"], input_tokens=prompt, output_tokens=completion)


def read_completion_stream(raw: bytes) -> tuple[Outcome, dict[str, Any] | None]:
    """A ``text_completion`` stream validated frame by frame, and its in-band error payload."""
    payloads, error = data_payloads(raw)
    text: list[str] = []
    usage = None
    for payload in payloads:
        validate_schema(OPENAI_SPEC, completion_chunk_schema(), payload)
        text.extend(choice["text"] for choice in payload["choices"])
        usage = payload.get("usage") or usage
    prompt, completion = openai_usage(usage)
    return Outcome(text="".join(text), input_tokens=prompt, output_tokens=completion), error


def legacy_request(path: str, model: str, text: str, *, stream: bool) -> tuple[str, dict[str, Any]]:
    """A minimal legacy completion request (usage asked for when streaming)."""
    body: dict[str, Any] = {"model": model, "prompt": text, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return path, body


def legacy_error_cases(model: str) -> list[ErrorCase]:
    """Bad requests every legacy-completion dialect rejects the same way."""
    return [
        ErrorCase("missing-model", {"prompt": "hi"}, "model"),
        ErrorCase("missing-prompt", {"model": model}, "prompt"),
        ErrorCase("prompt-wrong-type", {"model": model, "prompt": {"text": "hi"}}, "prompt"),
        ErrorCase("several-prompts", {"model": model, "prompt": ["a", "b"]}, "prompt"),
        ErrorCase("echo-wrong-type", {"model": model, "prompt": "hi", "echo": "yes"}, "echo"),
        ErrorCase(
            "temperature-out-of-range",
            {"model": model, "prompt": "hi", "temperature": 2.5},
            "temperature",
        ),
        ErrorCase(
            "penalty-out-of-range",
            {"model": model, "prompt": "hi", "presence_penalty": -3},
            "presence_penalty",
        ),
        ErrorCase(
            "five-stop-sequences",
            {"model": model, "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]},
            "stop",
        ),
        ErrorCase("n-zero", {"model": model, "prompt": "hi", "n": 0}, "n"),
    ]


class OpenAICompletionsAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "openai_completions"
    supports_tools = False

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return legacy_request("/v1/completions", model, text, stream=stream)

    def read_response(self, body: dict[str, Any]) -> Outcome:
        return read_completion(body)

    def read_stream(self, raw: bytes) -> Outcome:
        outcome, error = read_completion_stream(raw)
        if error is None:
            return outcome
        return dataclasses.replace(outcome, error=self.read_error(200, error))

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        validate("ErrorResponse", body)
        return body["error"]["message"]

    def error_cases(self) -> list[ErrorCase]:
        return legacy_error_cases("openai/echo")


ADAPTER = OpenAICompletionsAdapter()
