"""The gateway validates what OpenAI's schema validates, no more: every numeric bound (minimum,
maximum and their exclusive forms) of every property of the chat, completions and embeddings
request schemas in the vendored spec is walked, and a real gateway (mock upstream, over HTTP)
must accept each value the schema accepts at the bound and refuse, with a 400 naming the field,
the value just outside it. Where the gateway cannot honour a value the schema allows, it says so
with a 400 naming the field (:data:`CANNOT_HONOUR`, each with its reason)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.dialects.adapters.gateway import post, serve
from tests.schemas import load_spec

SPEC = "openai-chat.openapi.json"
INT64 = (-(2**63), 2**63 - 1)
"""``seed`` is an int64: the schema writes its bounds as doubles, which round past int64's, so
integer bounds are taken within int64."""

ROUTES = {
    "CreateChatCompletionRequest": (
        "/v1/chat/completions",
        {"model": "mock/echo", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "CreateCompletionRequest": ("/v1/completions", {"model": "mock/echo", "prompt": "hi"}),
    "CreateEmbeddingRequest": ("/v1/embeddings", {"model": "mock/embed-small", "input": "hi"}),
}

CANNOT_HONOUR = {("CreateCompletionRequest", "best_of"): lambda value: value > 1}
"""Values the schema allows that the gateway refuses by name: ``best_of`` > 1 asks for several
candidates server-side, which chat models cannot give."""


@dataclass(frozen=True)
class Case:
    schema: str
    field: str
    value: int | float
    allowed: bool

    def __str__(self) -> str:
        verdict = "ok" if self.allowed else "refused"
        return f"{self.schema}.{self.field}={self.value}:{verdict}"


def _resolve(schemas: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schemas[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _numeric_variants(schemas: dict[str, Any], node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The numeric schemas a property may take (through ``$ref``, ``anyOf``, ``oneOf``,
    ``allOf``)."""
    node = _resolve(schemas, node)
    if node.get("type") in ("integer", "number"):
        yield node
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(key, []):
            yield from _numeric_variants(schemas, sub)


def _properties(schemas: dict[str, Any], node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    node = _resolve(schemas, node)
    yield from node.get("properties", {}).items()
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, []):
            yield from _properties(schemas, sub)


def _cases_at(schema: str, field: str, number: dict[str, Any]) -> Iterator[Case]:
    integer = number["type"] == "integer"
    step = 1 if integer else 0.01
    low, high = INT64 if integer else (float("-inf"), float("inf"))
    if "minimum" in number:
        bound = max(number["minimum"], low) if integer else number["minimum"]
        yield Case(schema, field, int(bound) if integer else bound, True)
        if bound > low:
            yield Case(schema, field, bound - step, False)
    if "maximum" in number:
        bound = min(number["maximum"], high) if integer else number["maximum"]
        yield Case(schema, field, int(bound) if integer else bound, True)
        if bound < high:
            yield Case(schema, field, bound + step, False)
    if "exclusiveMinimum" in number:
        yield Case(schema, field, number["exclusiveMinimum"], False)
        yield Case(schema, field, number["exclusiveMinimum"] + step, True)
    if "exclusiveMaximum" in number:
        yield Case(schema, field, number["exclusiveMaximum"], False)
        yield Case(schema, field, number["exclusiveMaximum"] - step, True)


def bound_cases() -> list[Case]:
    """Every bound of every numeric property of the three request schemas, at and beyond."""
    schemas = load_spec(SPEC)["components"]["schemas"]
    cases: dict[tuple[str, str, int | float], Case] = {}
    for schema in ROUTES:
        for field, node in _properties(schemas, schemas[schema]):
            for number in _numeric_variants(schemas, node):
                for case in _cases_at(schema, field, number):
                    cases[(schema, field, case.value)] = case
    return list(cases.values())


CASES = bound_cases()


def test_the_walk_finds_the_bounds_of_every_schema() -> None:
    walked = {(case.schema, case.field) for case in CASES}
    for schema in ROUTES:
        assert any(s == schema for s, _ in walked), schema
    for expected in [
        ("CreateChatCompletionRequest", "temperature"),
        ("CreateChatCompletionRequest", "top_logprobs"),
        ("CreateChatCompletionRequest", "seed"),
        ("CreateCompletionRequest", "best_of"),
        ("CreateCompletionRequest", "max_tokens"),
        ("CreateEmbeddingRequest", "dimensions"),
    ]:
        assert expected in walked


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path) as url:
        yield url


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_the_gateway_accepts_what_the_schema_accepts(gateway: str, case: Case) -> None:
    path, base = ROUTES[case.schema]
    answer = await post(gateway, path, {**base, case.field: case.value})
    honour = CANNOT_HONOUR.get((case.schema, case.field))
    if case.allowed and (honour is None or not honour(case.value)):
        assert answer.status == 200, answer.body
        return
    assert answer.status == 400, answer.body
    assert answer.json()["error"]["param"] == case.field


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/chat/completions", "max_completion_tokens"),
        ("/v1/completions", "max_tokens"),
    ],
)
async def test_a_zero_token_limit_is_accepted(gateway: str, path: str, field: str) -> None:
    """The issue's case: no minimum in the chat schema, 0 in the completions one."""
    schema = next(s for s, (p, _) in ROUTES.items() if p == path)
    answer = await post(gateway, path, {**ROUTES[schema][1], field: 0})
    assert answer.status == 200, answer.body


async def test_best_of_zero_is_accepted(gateway: str) -> None:
    path, base = ROUTES["CreateCompletionRequest"]
    assert (await post(gateway, path, {**base, "best_of": 0})).status == 200
