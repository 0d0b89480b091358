"""proxy/dialects/orq.py (``/v2/router/completions``): every gateway control decoded, validated
with orq's exact limits and carried on ``Call.options``; ``{{inputs}}``; legacy-completion
answers; orq's error shape; and requests built from orq's documented examples, end to end."""

from __future__ import annotations

import copy
import json
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.core.canonical import CacheOptions, Call, Message, RetryOptions, Usage, WeightedTarget
from proxy.core.errors import BadRequest, RateLimited, UpstreamUnavailable
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.dialects.orq import DOC_URL, OrqDialect
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, post, serve
from tests.proxy.dialects.adapters.orq import ADAPTER, ERROR_SCHEMA
from tests.schemas import validate

DIALECT = OrqDialect()
PATH = "/v2/router/completions"
MOCK_SAYS = "This is the Crossway mock provider. You said: "

# Every control of DIALECTS.md section 4, with its documented values verbatim.
CONTROLS: dict[str, Any] = {
    "retry": {"count": 3, "on_codes": [429, 500, 502, 503, 504]},
    "fallbacks": [{"model": "openai/gpt-5"}, {"model": "anthropic/claude-4-opus"}],
    "cache": {"ttl": 1800, "type": "exact_match"},
    "load_balancer": {
        "type": "weight_based",
        "models": [
            {"model": "openai/gpt-5", "weight": 0.7},
            {"model": "anthropic/claude-4-opus", "weight": 0.3},
        ],
    },
    "timeout": {"call_timeout": 30000},
    "plugins": [{"id": "pii_redaction", "entities": ["email", "phone"], "on_failure": "block"}],
}
ORQ: dict[str, Any] = {
    "identity": {
        "id": "identity_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "display_name": "Jane Doe",
        "email": "jane.doe@example.com",
        "metadata": [{"plan": "enterprise"}],
        "tags": ["vip"],
    },
    "thread": {"id": "thread_01ARZ3NDEKTSV4RRFFQ69G5FAV", "tags": ["customer-support"]},
    "inputs": {"customer_name": "John Smith", "issue_type": "billing"},
    "security": {"mask": ["input", "output", "system", "all"]},
}
EXAMPLE: dict[str, Any] = {
    "model": "openai/gpt-5",
    "prompt": "Help {{customer_name}} with a {{ issue_type }} question",
    "echo": False,
    "frequency_penalty": 0,
    "max_tokens": 64,
    "presence_penalty": 0,
    "seed": 123,
    "stop": ["\n\n"],
    "temperature": 1,
    "top_p": 1,
    "n": 1,
    "user": "user-42",
    "name": "support-trace",
    **CONTROLS,
    "orq": ORQ,
}
FILLED = "Help John Smith with a billing question"

# orq's API reference example for this endpoint (docs.orq.ai, "Create completion"), with its
# "<string>" placeholders filled in; it uses the deprecated `orq` envelope and `contact`.
REFERENCE_EXAMPLE: dict[str, Any] = {
    "model": "openai/gpt-4o",
    "prompt": "Dear {{customer_name}}, about your {{issue_type}} issue",
    "echo": False,
    "frequency_penalty": 0,
    "max_tokens": 16,
    "presence_penalty": 0,
    "seed": 123,
    "stop": "<string>",
    "temperature": 1,
    "top_p": 1,
    "user": "<string>",
    "orq": {
        "retry": {"count": 3, "on_codes": [429, 500, 502]},
        "fallbacks": [{"model": "openai/gpt-5"}, {"model": "anthropic/claude-4-opus"}],
        "contact": {
            "id": "contact_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "display_name": "Jane Doe",
            "email": "jane.doe@example.com",
        },
        "thread": {"id": "thread_01ARZ3NDEKTSV4RRFFQ69G5FAV", "tags": ["customer-support"]},
        "inputs": {"customer_name": "John Smith", "issue_type": "billing"},
        "cache": {"ttl": 3600, "type": "exact_match"},
        "knowledge_bases": [{"knowledge_id": "knowledge_01ARZ3NDEKTSV4RRFFQ69G5FAV", "top_k": 5}],
        "timeout": {"call_timeout": 30000},
    },
    "stream": False,
}

# The seed document's own example: its optional fields as it writes them (no `type` in `cache`
# or `load_balancer`), plus the required `model` and `prompt`.
SEED_EXAMPLE: dict[str, Any] = {
    "model": "openai/gpt-4o",
    "prompt": "Summarise the ticket for {{customer_name}}",
    "retry": {"count": 2},
    "fallbacks": [{"model": "anthropic/claude-4-opus"}],
    "cache": {"ttl": 3600},
    "load_balancer": {
        "models": [
            {"model": "openai/gpt-4o", "weight": 0.7},
            {"model": "anthropic/claude-4-opus", "weight": 0.3},
        ]
    },
    "timeout": {"call_timeout": 30000},
    "orq": {
        "identity": {"id": "identity_1"},
        "thread": {"id": "thread_1"},
        "inputs": {"customer_name": "John Smith"},
        "security": {"mask": ["input"]},
        "knowledge_bases": [{"knowledge_id": "knowledge_1", "top_k": 5}],
    },
}


def decode(body: dict[str, Any]) -> Call:
    return DIALECT.decode(json.dumps(body).encode(), {}, "req-1", time.perf_counter())


def rejection(body: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        decode(body)
    return caught.value


def minimal(**fields: Any) -> dict[str, Any]:
    return {"model": "openai/gpt-5", "prompt": "hi", **fields}


# ---------------------------------------------------------------------------------------------
# Controls
# ---------------------------------------------------------------------------------------------


def _expected_options_checks(call: Call) -> None:
    options = call.options
    assert options.retry == RetryOptions(count=3, on_codes=(429, 500, 502, 503, 504))
    assert options.fallbacks == ["openai/gpt-5", "anthropic/claude-4-opus"]
    assert options.cache == CacheOptions(ttl=1800, type="exact_match")
    assert options.load_balancer == [
        WeightedTarget(model="openai/gpt-5", weight=0.7),
        WeightedTarget(model="anthropic/claude-4-opus", weight=0.3),
    ]
    assert options.timeout == 30.0
    assert options.mask == frozenset({"input", "output", "system", "all"})
    assert options.pii == [
        {
            "id": "pii_redaction",
            "entities": ["email", "phone"],
            "on_failure": "block",
            "language": None,
            "threshold": None,
        }
    ]
    assert options.metadata == {
        "identity": ORQ["identity"],
        "thread": ORQ["thread"],
        "name": "support-trace",
    }


def test_every_control_becomes_a_typed_option() -> None:
    call = decode(EXAMPLE)
    assert call.dialect == "orq"
    assert call.model == "openai/gpt-5"
    _expected_options_checks(call)
    assert call.messages == [Message(role="user", content=FILLED)]
    assert call.extra == {}


def test_controls_inside_the_deprecated_orq_object_mean_the_same() -> None:
    nested = {key: value for key, value in EXAMPLE.items() if key not in CONTROLS}
    nested["orq"] = {**ORQ, **CONTROLS}
    _expected_options_checks(decode(nested))


def test_top_level_control_wins_over_the_orq_one() -> None:
    call = decode(
        minimal(retry={"count": 5}, orq={"retry": {"count": 1}, "cache": {"type": "exact_match"}})
    )
    assert call.options.retry is not None
    assert call.options.retry.count == 5
    assert call.options.cache == CacheOptions(ttl=1800, type="exact_match")


def test_documented_defaults() -> None:
    call = decode(
        minimal(
            retry={},
            cache={"type": "exact_match"},
            load_balancer={"type": "weight_based", "models": [{"model": "a/b"}]},
            plugins=[{"id": "pii_redaction"}],
        )
    )
    assert call.options.retry == RetryOptions(count=3, on_codes=(429, 500, 502, 503, 504))
    assert call.options.cache == CacheOptions(ttl=1800)
    assert call.options.load_balancer == [WeightedTarget(model="a/b", weight=0.5)]
    assert call.options.pii == [
        {
            "id": "pii_redaction",
            "entities": None,
            "on_failure": "block",
            "language": None,
            "threshold": None,
        }
    ]


def test_seed_example_optional_fields_take_their_defaults() -> None:
    body = copy.deepcopy(SEED_EXAMPLE)
    del body["orq"]["knowledge_bases"]
    options = decode(body).options
    assert options.cache == CacheOptions(ttl=3600, type="exact_match")
    assert options.load_balancer == [
        WeightedTarget(model="openai/gpt-4o", weight=0.7),
        WeightedTarget(model="anthropic/claude-4-opus", weight=0.3),
    ]
    assert options.retry == RetryOptions(count=2)


def test_load_balancer_as_the_older_bare_list() -> None:
    options = decode(minimal(orq={"load_balancer": [{"model": "a/b", "weight": 0.2}]})).options
    assert options.load_balancer == [WeightedTarget(model="a/b", weight=0.2)]
    assert rejection(minimal(load_balancer=[])).param == "load_balancer"


def test_no_controls_no_options() -> None:
    options = decode(minimal()).options
    assert (options.retry, options.fallbacks, options.cache, options.load_balancer) == (None,) * 4
    assert (options.timeout, options.mask, options.pii, options.metadata) == (None,) * 4


def test_contact_is_the_older_name_of_identity() -> None:
    call = decode(minimal(orq={"contact": {"id": "c-1", "email": "a@b.c"}}))
    assert call.options.metadata == {"identity": {"id": "c-1", "email": "a@b.c"}}


def test_top_level_identity_and_thread_as_newer_orq_clients_send_them() -> None:
    call = decode(minimal(identity={"id": "u-1"}, thread={"id": "t-1"}))
    assert call.options.metadata == {"identity": {"id": "u-1"}, "thread": {"id": "t-1"}}


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        (minimal(retry={"count": 1}), True),
        (minimal(retry={"count": 5}), True),
        (minimal(cache={"type": "exact_match", "ttl": 1}), True),
        (minimal(cache={"type": "exact_match", "ttl": 259200}), True),
        (
            minimal(
                load_balancer={
                    "type": "weight_based",
                    "models": [{"model": "a/b", "weight": 0.001}],
                }
            ),
            True,
        ),
        (
            minimal(
                load_balancer={"type": "weight_based", "models": [{"model": "a/b", "weight": 1}]}
            ),
            True,
        ),
        (minimal(retry={"count": 0}), False),
        (minimal(retry={"count": 6}), False),
        (minimal(cache={"type": "exact_match", "ttl": 0}), False),
        (minimal(cache={"type": "exact_match", "ttl": 259201}), False),
        (
            minimal(
                load_balancer={"type": "weight_based", "models": [{"model": "a/b", "weight": 1.01}]}
            ),
            False,
        ),
        (minimal(timeout={"call_timeout": 0}), False),
    ],
)
def test_limits_are_exact(body: dict[str, Any], ok: bool) -> None:
    if ok:
        decode(body)
    else:
        assert rejection(body).status == 400


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (minimal(retry={"count": 6}), "retry.count", "<= 5"),
        (minimal(orq={"retry": {"count": 6}}), "orq.retry.count", "<= 5"),
        (minimal(retry={"on_codes": [200]}), "retry.on_codes[0]", ">= 400"),
        (minimal(retry={"count": 2, "backoff": 1}), "retry", "backoff"),
        (minimal(cache={"type": "exact_match", "ttl": 300000}), "cache.ttl", "<= 259200"),
        (minimal(orq={"cache": {"type": "exact_match", "ttl": 300000}}), "orq.cache.ttl", "259200"),
        (minimal(cache={"type": "semantic"}), "cache.type", "semantic"),
        (minimal(orq={"security": {"mask": ["input", "pii"]}}), "orq.security.mask[1]", "'pii'"),
        (minimal(security={"mask": "all"}), "security.mask", "array"),
        (
            minimal(plugins=[{"id": "pii_redaction", "threshold": 2}]),
            "plugins[0].threshold",
            "<= 1",
        ),
        (
            minimal(plugins=[{"id": "pii_redaction", "language": "fr"}]),
            "plugins[0].language",
            "'fr'",
        ),
        (
            minimal(load_balancer={"type": "round_robin", "models": [{"model": "a/b"}]}),
            "load_balancer.type",
            "round_robin",
        ),
        (
            minimal(load_balancer={"type": "weight_based", "models": []}),
            "load_balancer.models",
            "length",
        ),
        (minimal(timeout={"call_timeout": "30s"}), "timeout.call_timeout", "float"),
        (minimal(fallbacks=[{"model": ""}]), "fallbacks[0].model", "length"),
        (minimal(fallbacks="openai/gpt-5"), "fallbacks", "array"),
        (minimal(orq={"identity": {"display_name": "x"}}), "orq.identity.id", "missing"),
        (minimal(orq={"inputs": "x"}), "orq.inputs", "object"),
        (minimal(plugins=[{"id": "jailbreak"}]), "plugins[0].id", "jailbreak"),
        (
            minimal(plugins=[{"id": "pii_redaction", "on_failure": "log"}]),
            "plugins[0].on_failure",
            "log",
        ),
        (minimal(name=5), "name", "str"),
        (minimal(stop=["a", "b", "c", "d", "e"]), "stop", "length"),
        (minimal(temperature=2.5), "temperature", "<= 2"),
    ],
)
def test_invalid_controls_name_the_field(body: dict[str, Any], param: str, words: str) -> None:
    error = rejection(body)
    assert error.status == 400
    assert error.param == param
    assert param in error.message
    assert words in error.message


@pytest.mark.parametrize("where", ["top", "orq"])
def test_knowledge_bases_are_a_clear_400(where: str) -> None:
    knowledge = {"knowledge_bases": [{"knowledge_id": "kb_1", "top_k": 5}]}
    body = minimal(**knowledge) if where == "top" else minimal(orq=knowledge)
    error = rejection(body)
    field = "knowledge_bases" if where == "top" else "orq.knowledge_bases"
    assert (error.status, error.param, error.code) == (400, field, "knowledge_base_not_configured")
    assert error.message.startswith(f"{field}: no knowledge base is configured")


def test_controls_are_not_forwarded_but_unknown_fields_are() -> None:
    call = decode({**EXAMPLE, "top_k": 40, "logit_bias": {"50256": -100}})
    assert list(call.extra) == ["top_k"]
    assert call.params.logit_bias == {"50256": -100}


# ---------------------------------------------------------------------------------------------
# Prompt, inputs and legacy parameters
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "inputs", "sent"),
    [
        ("Hi {{name}}!", {"name": "Ada"}, "Hi Ada!"),
        ("Hi {{ name }} and {{name}}", {"name": "Ada"}, "Hi Ada and Ada"),
        (
            "{{n}} items, vip={{vip}}, x={{x}}",
            {"n": 3, "vip": True, "x": None},
            "3 items, vip=true, x=null",
        ),
        ("Hi {{missing}}", {"name": "Ada"}, "Hi {{missing}}"),
        ("No placeholders", {"name": "Ada"}, "No placeholders"),
        ("Hi {{name}}", None, "Hi {{name}}"),
        (["Hi {{name}}"], {"name": "Ada"}, "Hi Ada"),
    ],
)
def test_inputs_fill_placeholders(prompt: Any, inputs: Any, sent: str) -> None:
    body = (
        minimal(prompt=prompt) if inputs is None else minimal(prompt=prompt, orq={"inputs": inputs})
    )
    assert decode(body).messages == [Message(role="user", content=sent)]


def test_legacy_parameters() -> None:
    call = decode(EXAMPLE)
    params = call.params
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (64, 1, 1, 123)
    assert (params.n, params.stop, params.user) == (1, ["\n\n"], "user-42")
    assert decode(minimal()).params.max_tokens == 16


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "hi"}, "model"),
        ({"model": "openai/gpt-5"}, "prompt"),
        (minimal(prompt=["a", "b"]), "prompt"),
        (minimal(prompt=[[1, 2]]), "prompt"),
        (minimal(suffix="end"), "suffix"),
    ],
)
def test_legacy_request_errors(body: dict[str, Any], param: str) -> None:
    assert rejection(body).param == param


# ---------------------------------------------------------------------------------------------
# Answers and errors
# ---------------------------------------------------------------------------------------------

RESPONSE = Response(
    id="cmpl-1",
    model="gpt-5",
    created=1_700_000_000,
    choices=[
        Choice(index=0, message=Message(role="assistant", content=" fine."), finish_reason="stop")
    ],
    usage=Usage(input=5, cache_read=3, output=7, reasoning=2),
)


def test_response_is_a_legacy_text_completion_with_token_details() -> None:
    body = json.loads(
        DIALECT.encode_response(decode(minimal()), Reply("openai", "gpt-5", response=RESPONSE))
    )
    validate("CreateCompletionResponse", body)
    assert body["object"] == "text_completion"
    assert body["choices"] == [
        {"text": " fine.", "index": 0, "logprobs": None, "finish_reason": "stop"}
    ]
    assert body["usage"] == {
        "prompt_tokens": 8,
        "completion_tokens": 9,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_echo_returns_the_filled_prompt() -> None:
    call = decode(minimal(prompt="Hi {{n}}", echo=True, orq={"inputs": {"n": "Ada"}}))
    body = json.loads(DIALECT.encode_response(call, Reply("openai", "gpt-5", response=RESPONSE)))
    assert body["choices"][0]["text"] == "Hi Ada fine."


def test_stream_frames_and_in_band_error_in_orqs_shape() -> None:
    call = decode(minimal(stream=True, stream_options={"include_usage": True}))
    encoder = DIALECT.stream_encoder(call, Reply("openai", "gpt-5", response=RESPONSE))
    chunks = [
        Chunk(id="c", model="gpt-5", choices=[ChunkChoice(0, Delta(role="assistant", content=""))]),
        Chunk(id="c", model="gpt-5", choices=[ChunkChoice(0, Delta(content="Hel"))]),
        Chunk(id="c", model="gpt-5", choices=[ChunkChoice(0, Delta(content="lo"))]),
        Chunk(id="c", model="gpt-5", choices=[ChunkChoice(0, Delta(), finish_reason="stop")]),
        Chunk(id="c", model="gpt-5", choices=[], usage=Usage(input=2, output=1)),
    ]
    raw = b"".join(encoder.chunk(c) for c in chunks) + encoder.end()
    outcome = ADAPTER.read_stream(raw)
    assert (outcome.text, outcome.input_tokens, outcome.output_tokens) == ("Hello", 2, 1)

    cut = b"".join(encoder.chunk(c) for c in chunks[:2])
    cut += encoder.error(UpstreamUnavailable("the upstream cut the stream", provider="openai"))
    outcome = ADAPTER.read_stream(cut)
    assert (outcome.text, outcome.error) == ("Hel", "the upstream cut the stream")


def test_error_body_is_orqs() -> None:
    error = RateLimited("slow down", retry_after=2)
    payload = json.loads(DIALECT.encode_error(error, "req-1"))
    ADAPTER.read_error(429, payload)
    assert payload == {
        "error": {"code": "rate_limit_exceeded", "message": "slow down", "doc_url": DOC_URL}
    }
    assert ERROR_SCHEMA["properties"]["error"]["required"] == ["code", "message", "doc_url"]


def test_no_dialect_specific_headers() -> None:
    reply = Reply("openai", "gpt-5", response=RESPONSE, attempts=3)
    assert DIALECT.response_headers(decode(minimal()), reply) == {}


# ---------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path) as url:
        yield url


async def test_example_with_every_control_succeeds(gateway: str) -> None:
    reply = await post(gateway, PATH, EXAMPLE)
    assert reply.status == 200, reply.body
    outcome = ADAPTER.read_response(reply.json())
    assert outcome.text == MOCK_SAYS + FILLED
    assert reply.headers["x-crossway-model"] == "openai/gpt-5"


async def test_example_streamed(gateway: str) -> None:
    body = {**EXAMPLE, "stream": True, "stream_options": {"include_usage": True}}
    reply = await post(gateway, PATH, body)
    assert reply.status == 200, reply.body
    outcome = ADAPTER.read_stream(reply.body)
    assert outcome.text == MOCK_SAYS + FILLED
    assert outcome.output_tokens == len(outcome.text.split())


async def test_reference_example_is_refused_only_for_its_knowledge_bases(gateway: str) -> None:
    reply = await post(gateway, PATH, REFERENCE_EXAMPLE)
    assert reply.status == 400
    message = ADAPTER.read_error(400, reply.json())
    assert message.startswith("orq.knowledge_bases: no knowledge base is configured")

    without = copy.deepcopy(REFERENCE_EXAMPLE)
    del without["orq"]["knowledge_bases"]
    reply = await post(gateway, PATH, without)
    assert reply.status == 200, reply.body
    text = ADAPTER.read_response(reply.json()).text
    assert text == MOCK_SAYS + "Dear John Smith, about your billing issue"


async def test_seed_example_is_refused_only_for_its_knowledge_base(gateway: str) -> None:
    reply = await post(gateway, PATH, SEED_EXAMPLE)
    assert reply.status == 400
    assert ADAPTER.read_error(400, reply.json()).startswith("orq.knowledge_bases:")

    without = copy.deepcopy(SEED_EXAMPLE)
    del without["orq"]["knowledge_bases"]
    reply = await post(gateway, PATH, without)
    assert reply.status == 200, reply.body
    assert (
        ADAPTER.read_response(reply.json()).text
        == MOCK_SAYS + "Summarise the ticket for John Smith"
    )


async def test_out_of_range_control_over_http(gateway: str) -> None:
    reply = await post(gateway, PATH, minimal(retry={"count": 6}))
    assert reply.status == 400
    assert "retry.count" in ADAPTER.read_error(400, reply.json())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_request_fallbacks_are_honoured(tmp_path: Path, stream: bool) -> None:
    config = MOCK_PROVIDERS + textwrap.dedent(
        """\
        plugins:
          - fallback: {}
        """
    )
    body = {
        "model": "openai/error-503",
        "prompt": "rescue me",
        "stream": stream,
        "orq": {"fallbacks": [{"model": "anthropic/echo"}]},
    }
    async with serve(tmp_path, config) as url:
        reply = await post(url, PATH, body)
    assert reply.status == 200, reply.body
    assert reply.headers["x-crossway-provider"] == "anthropic"
    read = ADAPTER.read_stream(reply.body) if stream else ADAPTER.read_response(reply.json())
    assert read.text == "rescue me"
