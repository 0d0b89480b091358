"""The OpenAI embeddings dialect: requests into canonical calls, vectors into
``CreateEmbeddingResponse`` (validated against the OpenAPI schema), errors in OpenAI's shape."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from proxy.core.canonical import Usage
from proxy.core.errors import BadRequest, UpstreamUnavailable
from proxy.core.reply import Embeddings, Reply
from proxy.dialects import all_dialects, other_dialects
from proxy.dialects.openai_embeddings import MAX_INPUTS, OpenAIEmbeddingsDialect
from tests.schemas import validate

DIALECT = OpenAIEmbeddingsDialect()


def decode(body: dict[str, Any]) -> Any:
    return DIALECT.decode(json.dumps(body).encode(), {"x": "y"}, "req-1", 1.5)


def test_a_string_becomes_one_text() -> None:
    call = decode({"model": "embed", "input": "hello", "user": "u-1"})
    assert call.model == "embed"
    assert call.messages == []
    assert call.dialect == "openai_embeddings"
    assert call.embedding is not None
    assert call.embedding.texts == ["hello"]
    assert call.embedding.tokens is None
    assert call.embedding.encoding_format == "float"
    assert call.params.user == "u-1"
    assert call.timings.start == 1.5


def test_lists_of_strings_tokens_and_token_lists() -> None:
    assert decode({"model": "m", "input": ["a", "b"]}).embedding.texts == ["a", "b"]
    assert decode({"model": "m", "input": [1, 2]}).embedding.tokens == [[1, 2]]
    assert decode({"model": "m", "input": [[1], [2, 3]]}).embedding.tokens == [[1], [2, 3]]


def test_options_and_passed_through_fields() -> None:
    call = decode(
        {
            "model": "m",
            "input": "x",
            "encoding_format": "base64",
            "dimensions": 256,
            "input_type": "query",
        }
    )
    assert call.embedding.encoding_format == "base64"
    assert call.embedding.dimensions == 256
    assert set(call.extra) == {"input_type"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["a", ""]}, "input"),
        ({"model": "m", "input": [1, "a"]}, "input"),
        ({"model": "m", "input": [[1], 2]}, "input"),
        ({"model": "m", "input": ["a"] * (MAX_INPUTS + 1)}, "input"),
        ({"model": "m", "input": True}, "input"),
        ({"model": "m", "input": "x", "dimensions": -1}, "dimensions"),
        ({"input": "x"}, "model"),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        decode(body)
    assert refused.value.param == param


SEVEN = Usage(input=7)


def reply(vectors: list[list[float]], usage: Usage | None = SEVEN) -> Reply:
    return Reply(
        provider="p", model="m", embeddings=Embeddings(vectors=vectors, model="m-2", usage=usage)
    )


def test_floats_validate_against_the_schema() -> None:
    call = decode({"model": "m", "input": ["a", "b"]})
    body = json.loads(DIALECT.encode_response(call, reply([[0.5, -1.0], [0.25, 2.0]])))
    validate("CreateEmbeddingResponse", body)
    assert body["data"][1] == {"index": 1, "embedding": [0.25, 2.0], "object": "embedding"}
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert body["model"] == "m-2"


def test_base64_is_little_endian_float32() -> None:
    call = decode({"model": "m", "input": "a", "encoding_format": "base64"})
    body = json.loads(DIALECT.encode_response(call, reply([[0.5, -1.0]], usage=None)))
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (0.5, -1.0)
    assert body["usage"]["prompt_tokens"] == 0


def test_errors_are_openai_s() -> None:
    error = UpstreamUnavailable("down", provider="p")
    body = json.loads(DIALECT.encode_error(error, "req"))
    assert body["error"]["message"] == "down"
    assert DIALECT.error_status(error) == error.status


def test_it_is_registered_apart_from_the_completion_dialects() -> None:
    assert "openai_embeddings" in {d.name for d in other_dialects()}
    assert "openai_embeddings" not in {d.name for d in all_dialects()}
    with pytest.raises(TypeError):
        DIALECT.stream_encoder(decode({"model": "m", "input": "a"}), reply([[1.0]]))
