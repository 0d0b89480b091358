"""Conformance adapter for orq router completions (``proxy.dialects.orq``).

No orq spec file ships with the seeds: responses and stream frames are OpenAI legacy completions
(validated against ``CreateCompletionResponse``, orq adds the token details, required here), and
errors are checked against :data:`ERROR_SCHEMA`, written from DIALECTS.md section 4.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonschema

from tests.proxy.dialects.adapters import ErrorCase, Outcome
from tests.proxy.dialects.adapters.openai_completions import (
    legacy_error_cases,
    legacy_request,
    read_completion,
    read_completion_stream,
)

PATH = "/v2/router/completions"
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "doc_url"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "minLength": 1},
                "message": {"type": "string", "minLength": 1},
                "doc_url": {"type": "string", "pattern": "^https://"},
            },
        }
    },
}


def _with(**fields: Any) -> dict[str, Any]:
    return {"model": "openai/echo", "prompt": "hi", **fields}


class OrqAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "orq"
    supports_tools = False

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return legacy_request(PATH, model, text, stream=stream)

    def read_response(self, body: dict[str, Any]) -> Outcome:
        outcome = read_completion(body)
        usage = body["usage"]
        assert "cached_tokens" in usage["prompt_tokens_details"]
        assert "reasoning_tokens" in usage["completion_tokens_details"]
        return outcome

    def read_stream(self, raw: bytes) -> Outcome:
        outcome, error = read_completion_stream(raw)
        if error is None:
            return outcome
        return dataclasses.replace(outcome, error=self.read_error(200, error))

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        jsonschema.validate(body, ERROR_SCHEMA)
        return body["error"]["message"]

    def error_cases(self) -> list[ErrorCase]:
        return [
            *legacy_error_cases("openai/echo"),
            ErrorCase("retry-count-6", _with(retry={"count": 6}), "retry.count"),
            ErrorCase("retry-count-0", _with(orq={"retry": {"count": 0}}), "orq.retry.count"),
            ErrorCase("retry-code-200", _with(retry={"on_codes": [200]}), "retry.on_codes"),
            ErrorCase(
                "cache-ttl-300000", _with(cache={"type": "exact_match", "ttl": 300000}), "cache.ttl"
            ),
            ErrorCase("cache-unknown-type", _with(cache={"type": "semantic"}), "cache.type"),
            ErrorCase(
                "mask-unknown-value",
                _with(orq={"security": {"mask": ["input", "everything"]}}),
                "orq.security.mask",
            ),
            ErrorCase(
                "knowledge-bases",
                _with(orq={"knowledge_bases": [{"knowledge_id": "kb_1", "top_k": 5}]}),
                "knowledge_bases",
            ),
            ErrorCase(
                "load-balancer-type",
                _with(load_balancer={"type": "round_robin", "models": [{"model": "a/b"}]}),
                "load_balancer.type",
            ),
            ErrorCase(
                "load-balancer-weight-0",
                _with(
                    load_balancer={
                        "type": "weight_based",
                        "models": [{"model": "a/b", "weight": 0}],
                    }
                ),
                "load_balancer.models",
            ),
            ErrorCase(
                "load-balancer-no-models",
                _with(load_balancer={"type": "weight_based", "models": []}),
                "load_balancer.models",
            ),
            ErrorCase(
                "timeout-negative", _with(timeout={"call_timeout": -5}), "timeout.call_timeout"
            ),
            ErrorCase("timeout-missing", _with(timeout={}), "call_timeout"),
            ErrorCase("fallback-without-model", _with(fallbacks=[{}]), "fallbacks"),
            ErrorCase("fallbacks-strings", _with(fallbacks=["openai/gpt-5"]), "fallbacks"),
            ErrorCase(
                "identity-without-id", _with(orq={"identity": {"email": "a@b.c"}}), "orq.identity"
            ),
            ErrorCase(
                "thread-tags-wrong-type",
                _with(orq={"thread": {"id": "t", "tags": "x"}}),
                "orq.thread.tags",
            ),
            ErrorCase("inputs-not-an-object", _with(orq={"inputs": ["a"]}), "orq.inputs"),
            ErrorCase("plugin-unknown-id", _with(plugins=[{"id": "toxicity"}]), "plugins"),
            ErrorCase(
                "plugin-on-failure",
                _with(plugins=[{"id": "pii_redaction", "on_failure": "ignore"}]),
                "plugins[0].on_failure",
            ),
        ]


ADAPTER = OrqAdapter()
