"""The ``guardrails:`` section: every type parsed from YAML (a bare ``on`` included), and each
problem reported with its path, the check left out."""

from __future__ import annotations

import yaml

from proxy.guardrails.config import (
    JsonSchemaCheck,
    KeywordsCheck,
    ModerationCheck,
    RegexCheck,
    WebhookCheck,
    parse_checks,
)

SECTION = """
no-secrets:   {type: secrets, on: input, action: block}
competitors:  {type: keywords, words: [acme, globex], on: output, action: block}
support-mod:  {type: moderation, provider: openai, model: omni-moderation-latest,
               categories: [harassment, self-harm], threshold: 0.5, on: both, action: block}
house-policy: {type: webhook, url: "https://guard.internal/check", timeout_ms: 300,
               on: both, action: block, on_error: allow}
schema:       {type: json_schema, on: output, action: retry}
ticket:       {type: regex, pattern: "T-[0-9]+", mode: require}
"""


def test_the_issue_s_section_parses_with_yaml_s_bare_on() -> None:
    errors: list[str] = []
    checks = parse_checks(yaml.safe_load(SECTION), "$.guardrails", errors)
    assert errors == []
    assert checks["no-secrets"].phases() == ("input",)
    competitors = checks["competitors"]
    assert isinstance(competitors, KeywordsCheck)
    assert competitors.phases() == ("output",)
    moderation = checks["support-mod"]
    assert isinstance(moderation, ModerationCheck)
    assert moderation.phases() == ("input", "output")
    assert moderation.categories == ["harassment", "self-harm"]
    webhook = checks["house-policy"]
    assert isinstance(webhook, WebhookCheck)
    assert (webhook.timeout_ms, webhook.on_error, webhook.stream) == (300, "allow", "hold")
    assert isinstance(checks["schema"], JsonSchemaCheck)
    assert checks["schema"].action == "retry"
    ticket = checks["ticket"]
    assert isinstance(ticket, RegexCheck)
    assert (ticket.mode, ticket.on) == ("require", "input")


def test_json_schema_defaults_to_output() -> None:
    checks = parse_checks({"s": {"type": "json_schema"}}, "$.guardrails", [])
    assert checks["s"].on == "output"


def test_each_problem_is_reported_with_its_path() -> None:
    errors: list[str] = []
    checks = parse_checks(
        {
            "bad name!": {"type": "secrets"},
            "unknown-type": {"type": "telepathy"},
            "unknown-key": {"type": "secrets", "colour": "red"},
            "no-words": {"type": "keywords", "words": []},
            "tokens-out": {"type": "max_tokens_in", "max": 10, "on": "output"},
            "schema-in": {"type": "json_schema", "on": "input"},
            "retry-words": {"type": "keywords", "words": ["a"], "action": "retry"},
            "bad-url": {"type": "webhook", "url": "ftp://x"},
            "fine": {"type": "secrets"},
        },
        "$.guardrails",
        errors,
    )
    assert list(checks) == ["fine"]
    assert len(errors) == 8
    assert errors[0].startswith("$.guardrails.bad name!: a check name")
    assert any(e.startswith("$.guardrails.unknown-type:") for e in errors)
    assert any(e.startswith("$.guardrails.unknown-key:") and "colour" in e for e in errors)
    assert "$.guardrails.tokens-out: max_tokens_in runs on input only (on: input)" in errors
    assert "$.guardrails.schema-in: json_schema runs on output only (on: output)" in errors
    assert "$.guardrails.retry-words: action retry is json_schema's only" in errors


def test_the_section_must_be_a_mapping() -> None:
    errors: list[str] = []
    assert parse_checks(["secrets"], "$.guardrails", errors) == {}
    assert errors == ["$.guardrails: expected a mapping of check names to checks"]
    assert parse_checks(None, "$.guardrails", errors) == {}
