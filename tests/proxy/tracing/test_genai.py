"""The GenAI conventions' attributes of an attempt (proxy.tracing.genai)."""

from __future__ import annotations

import json

import msgspec

from proxy.core.canonical import (
    Call,
    EmbeddingRequest,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    ImageURL,
    Message,
    Params,
    TextPart,
    Tool,
    ToolCall,
    Usage,
)
from proxy.core.reply import Choice, Response
from proxy.providers import PROVIDER_TYPES
from proxy.providers.base import ProviderConfig
from proxy.tracing import genai


def provider(config: dict) -> ProviderConfig:
    kind = PROVIDER_TYPES[config.pop("type")].config
    return msgspec.convert(config, kind)


def call(**fields) -> Call:
    fields.setdefault("messages", [Message(role="user", content="hi")])
    return Call(request_id="r", dialect="openai", model="alias", **fields)


def test_provider_names_are_the_conventions_well_known_values() -> None:
    assert genai.provider_name(provider({"type": "openai", "api_key": "k"})) == "openai"
    assert genai.provider_name(provider({"type": "anthropic", "api_key": "k"})) == "anthropic"
    groq = provider({"type": "openai", "api_key": "k", "preset": "groq"})
    assert genai.provider_name(groq) == "groq"
    mistral = provider({"type": "openai", "api_key": "k", "preset": "mistral"})
    assert genai.provider_name(mistral) == "mistral_ai"
    ollama = provider({"type": "openai", "preset": "ollama"})
    assert genai.provider_name(ollama) == "ollama"
    assert genai.provider_name(provider({"type": "mock"})) == "crossway.mock"


def test_the_operation_follows_the_call() -> None:
    assert genai.operation_name(call()) == "chat"
    embed = call(messages=[], embedding=EmbeddingRequest(texts=["a"]))
    assert genai.operation_name(embed) == "embeddings"
    legacy = Call(request_id="r", dialect="openai_completions", model="m", messages=[])
    assert genai.operation_name(legacy) == "text_completion"
    assert genai.attempt_name("chat", "gpt-4o") == "chat gpt-4o"


def test_request_attributes_name_only_what_the_client_set() -> None:
    bare = genai.request_attributes(call(), "chat", "openai", "gpt-4o")
    assert bare == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.stream": False,
    }
    params = Params(max_completion_tokens=9, temperature=1, top_p=0.5, stop="END", seed=3, n=2)
    full = genai.request_attributes(call(params=params, stream=True), "chat", "openai", "m")
    assert full["gen_ai.request.max_tokens"] == 9
    assert full["gen_ai.request.temperature"] == 1.0
    assert isinstance(full["gen_ai.request.temperature"], float)
    assert full["gen_ai.request.top_p"] == 0.5
    assert full["gen_ai.request.stop_sequences"] == ["END"]
    assert full["gen_ai.request.seed"] == 3
    assert full["gen_ai.request.choice.count"] == 2
    assert full["gen_ai.request.stream"] is True


def test_response_and_usage_attributes() -> None:
    message = Message(role="assistant", content="ok")
    response = Response(
        id="resp-1",
        model="gpt-4o-2024",
        choices=[Choice(index=0, message=message, finish_reason="length")],
        usage=Usage(input=5, cache_read=3, cache_write=2, output=7, reasoning=4),
    )
    attributes = genai.response_attributes(response)
    assert attributes["gen_ai.response.id"] == "resp-1"
    assert attributes["gen_ai.response.model"] == "gpt-4o-2024"
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert attributes["gen_ai.usage.input_tokens"] == 10  # cache reads and writes included
    assert attributes["gen_ai.usage.output_tokens"] == 11  # reasoning included
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 3
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 2
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 4


def test_server_attributes_of_an_upstream_url() -> None:
    assert genai.server_attributes("https://api.openai.com/v1/chat/completions") == {
        "server.address": "api.openai.com",
        "server.port": 443,
    }
    assert genai.server_attributes("http://127.0.0.1:8080/v1") == {
        "server.address": "127.0.0.1",
        "server.port": 8080,
    }
    assert genai.server_attributes("not a url") == {}


def test_content_is_the_conventions_json_and_never_a_blob() -> None:
    tool = Tool(function=FunctionDefinition(name="lookup", description="Find"))
    messages = [
        Message(role="system", content="Be brief."),
        Message(
            role="user",
            content=[
                TextPart(text="What is this?"),
                ImagePart(image_url=ImageURL(url="data:image/png;base64,AAAA")),
            ],
        ),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="c1", function=FunctionCall(name="lookup", arguments="{}"))],
        ),
        Message(role="tool", tool_call_id="c1", content="found"),
    ]
    attributes = genai.input_content(call(messages=messages, params=Params(tools=[tool])))
    assert json.loads(str(attributes["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "Be brief."}
    ]
    recorded = json.loads(str(attributes["gen_ai.input.messages"]))
    assert recorded == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "What is this?"},
                {"type": "blob", "modality": "image_url"},
            ],
        },
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "lookup", "arguments": "{}"}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "c1", "response": "found"}],
        },
    ]
    assert "AAAA" not in str(attributes)
    assert json.loads(str(attributes["gen_ai.tool.definitions"])) == [
        {"type": "function", "name": "lookup", "description": "Find"}
    ]
    response = Response(
        id="x",
        model="m",
        choices=[
            Choice(
                index=0, message=Message(role="assistant", content="A cat."), finish_reason="stop"
            )
        ],
    )
    assert json.loads(str(genai.output_content(response)["gen_ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "A cat."}],
            "finish_reason": "stop",
        }
    ]
    assert genai.input_content(call(messages=[], embedding=EmbeddingRequest(texts=["a"]))) == {}
