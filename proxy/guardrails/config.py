"""The top-level ``guardrails:`` section: named checks, each defined once by its ``type``.

Every check has ``on`` (``input``, ``output`` or ``both``: the phases it runs on), ``action``
(what a finding does: ``block``, ``warn``, or ``retry`` for ``json_schema``) and ``stream``
(``hold`` or ``end``: how a check that needs the whole answer runs on a streamed one; see
:mod:`proxy.guardrails.stream`). The types and their own keys:

- ``regex`` — ``pattern``; ``mode: deny`` (a match is a finding) or ``require`` (no match is).
- ``keywords`` — ``words``: whole words, any case.
- ``secrets`` — the gateway's secret detectors (API keys, tokens, private keys).
- ``pii`` — ``entities`` (the masking plugin's names; all of them when not given).
- ``max_tokens_in`` — ``max``: a ceiling on the prompt's estimated tokens (input only).
- ``json_schema`` — the answer must validate against the request's ``response_format`` schema
  (or its tools' parameter schemas for tool calls), or ``schema`` when given (output only).
- ``moderation`` — ``provider`` (an OpenAI-compatible provider of the config), ``model``,
  ``categories`` (all when not given), ``threshold``, ``timeout_ms``, ``on_error``.
- ``webhook`` — ``url``, ``timeout_ms``, ``on_error``, ``headers``.

YAML 1.1 reads a bare ``on`` key as the boolean true; :func:`parse_checks` takes it back as
``on``. Errors are appended to ``errors`` with their path, as the rest of the config reports
them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

Phase = Literal["input", "output"]
On = Literal["input", "output", "both"]
Action = Literal["block", "warn", "retry"]
StreamMode = Literal["hold", "end"]
OnError = Literal["allow", "block"]
Name = Annotated[str, Meta(pattern="^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
TimeoutMs = Annotated[int, Meta(ge=1, le=60_000)]
PiiEntity = Literal["email", "phone", "credit_card", "iban", "us_ssn", "ip_address", "secret"]


class _Check(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, tag_field="type"):
    on: On = "input"
    action: Action = "block"
    stream: StreamMode = "hold"

    def phases(self) -> tuple[Phase, ...]:
        """The phases this check runs on."""
        if self.on == "both":
            return ("input", "output")
        return (self.on,)


class RegexCheck(_Check, frozen=True, tag="regex"):
    """A regular expression: ``deny`` finds it, ``require`` finds its absence."""

    pattern: Annotated[str, Meta(min_length=1)]
    mode: Literal["deny", "require"] = "deny"


class KeywordsCheck(_Check, frozen=True, tag="keywords"):
    """Words that must not appear (whole words, any case)."""

    words: Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1)]


class SecretsCheck(_Check, frozen=True, tag="secrets"):
    """The gateway's secret detectors."""


class PiiCheck(_Check, frozen=True, tag="pii"):
    """The masking plugin's PII detectors, blocking (or warning) instead of masking."""

    entities: list[PiiEntity] | None = None


class MaxTokensInCheck(_Check, frozen=True, tag="max_tokens_in"):
    """A ceiling on the prompt's estimated tokens."""

    max: Annotated[int, Meta(ge=1)]


class JsonSchemaCheck(_Check, frozen=True, tag="json_schema"):
    """The answer validates against the request's schema (or ``schema``)."""

    on: On = "output"
    schema: dict[str, Any] | None = None


class ModerationCheck(_Check, frozen=True, tag="moderation"):
    """A provider's moderation endpoint (``POST {base_url}/moderations``)."""

    provider: str
    model: str = "omni-moderation-latest"
    categories: list[str] | None = None
    threshold: Annotated[float, Meta(ge=0, le=1)] = 0.5
    timeout_ms: TimeoutMs = 2_000
    on_error: OnError = "block"


class WebhookCheck(_Check, frozen=True, tag="webhook"):
    """The operator's own service (see :mod:`proxy.guardrails.webhook`)."""

    url: Annotated[str, Meta(pattern="^https?://")]
    timeout_ms: TimeoutMs = 1_000
    on_error: OnError = "block"
    headers: dict[str, str] = msgspec.field(default_factory=dict)


CheckConfig = (
    RegexCheck
    | KeywordsCheck
    | SecretsCheck
    | PiiCheck
    | MaxTokensInCheck
    | JsonSchemaCheck
    | ModerationCheck
    | WebhookCheck
)

_INPUT_ONLY = (MaxTokensInCheck,)
_OUTPUT_ONLY = (JsonSchemaCheck,)


def parse_checks(node: Any, path: str, errors: list[str]) -> dict[str, CheckConfig]:
    """The named checks of ``node`` (the section's YAML mapping; None is none); each problem is
    appended to ``errors`` with its path, and that check is left out."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        errors.append(f"{path}: expected a mapping of check names to checks")
        return {}
    checks: dict[str, CheckConfig] = {}
    for name, body in node.items():
        where = f"{path}.{name}"
        try:
            msgspec.convert(name, Name)
        except msgspec.ValidationError:
            errors.append(f"{where}: a check name is 1-64 letters, digits, '_', '.', '-'")
            continue
        if isinstance(body, dict) and True in body:  # YAML 1.1: a bare `on` key is `true`
            body = {("on" if key is True else key): value for key, value in body.items()}
        try:
            check: CheckConfig = msgspec.convert(body, CheckConfig, strict=False)
        except msgspec.ValidationError as exc:
            errors.append(f"{where}: {exc}")
            continue
        problem = _problem(check)
        if problem is not None:
            errors.append(f"{where}: {problem}")
            continue
        checks[name] = check
    return checks


def _problem(check: CheckConfig) -> str | None:
    """What ``check`` asks that its type cannot do, if anything."""
    if isinstance(check, _INPUT_ONLY) and check.on != "input":
        return "max_tokens_in runs on input only (on: input)"
    if isinstance(check, _OUTPUT_ONLY) and check.on != "output":
        return "json_schema runs on output only (on: output)"
    if check.action == "retry" and not isinstance(check, JsonSchemaCheck):
        return "action retry is json_schema's only"
    return None
