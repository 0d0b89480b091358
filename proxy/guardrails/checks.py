"""The checks, built once per config from their :mod:`~proxy.guardrails.config` by ``type``.

A :class:`Check` answers ``await inspect(texts, request) -> Finding`` for one phase of one request.
A check whose finding is a match in the text (``regex`` deny, ``keywords``, ``secrets``, ``pii``)
also offers its ``finder`` (a :data:`proxy.pii.detectors.Finder`): on a streamed answer it runs in
windows across chunk boundaries (:mod:`proxy.guardrails.stream`); every other output check
needs the whole answer (``whole``). Finders are the masking plugin's own detectors and its word
and pattern finders (:mod:`proxy.pii`). ``inspect`` raises only on a bug: a check that cannot
decide (a webhook that timed out) says so in its finding (``failed``).

:func:`build_checks` is the registry: it raises ValueError, naming the check, for what only
building can tell (a pattern that does not compile, a moderation provider that is not an
OpenAI-compatible provider of the config).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from msgspec import UNSET

from proxy.core.canonical import Call
from proxy.core.token_estimate import estimate_input_tokens
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import (
    CheckConfig,
    JsonSchemaCheck,
    KeywordsCheck,
    MaxTokensInCheck,
    ModerationCheck,
    Phase,
    PiiCheck,
    RegexCheck,
    SecretsCheck,
    WebhookCheck,
)
from proxy.guardrails.moderation import Moderation
from proxy.guardrails.texts import TextSet
from proxy.guardrails.verdicts import CLEAN, Finding
from proxy.guardrails.webhook import Webhook
from proxy.pii.custom import pattern_finder, words_finder
from proxy.pii.detectors import BUILTIN_FINDERS, Finder
from proxy.pii.labels import PRESIDIO_LABELS
from proxy.pii.restore import OutputRedactor
from proxy.pii.scanner import Scanner
from proxy.pii.secrets import find_secrets
from proxy.pii.text import Span, TextView
from proxy.providers.base import Provider

_FLAGGED = Finding(flagged=True)
_PII_FINDERS: dict[str, Finder] = {**BUILTIN_FINDERS, "secret": find_secrets}


class Check(Protocol):
    """One named check (see the module docstring)."""

    name: str
    config: CheckConfig
    finder: Finder | None
    """Set for a check that finds matches in text (windowed on streams), else None."""

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """What this check finds in ``texts`` of ``call``'s ``phase``; raises only on a bug."""
        ...


class FinderCheck:
    """A check that flags any match of ``finder`` in the texts."""

    __slots__ = ("config", "finder", "name")

    def __init__(self, name: str, config: CheckConfig, finder: Finder) -> None:
        self.name = name
        self.config = config
        self.finder: Finder | None = finder

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when the finder matches the texts (read together, one per line)."""
        finder = self.finder
        assert finder is not None
        return _FLAGGED if finder(texts.view()) else CLEAN


class RequiredPattern:
    """``regex`` with ``mode: require``: flagged when no text matches."""

    __slots__ = ("_find", "config", "finder", "name")

    def __init__(self, name: str, config: RegexCheck) -> None:
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._find = pattern_finder(config.pattern)

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when the pattern is found in no text."""
        if any(self._find(TextView(text)) for text in texts.texts):
            return CLEAN
        return _FLAGGED


class TokenCeiling:
    """``max_tokens_in``: flagged when the prompt's estimated tokens pass ``max``."""

    __slots__ = ("_max", "config", "finder", "name")

    def __init__(self, name: str, config: MaxTokensInCheck) -> None:
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._max = config.max

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when ``call``'s estimated input tokens exceed the ceiling."""
        if call.embedding is not None:
            tokens = call.embedding.estimated_tokens()
        else:
            tokens = estimate_input_tokens(call)
        return _FLAGGED if tokens > self._max else CLEAN


class SchemaCheck:
    """``json_schema``: the answer validates against the request's schema (see
    :func:`_schemas`); an answer with nothing to validate against passes."""

    __slots__ = ("_schema", "config", "finder", "name")

    def __init__(self, name: str, config: JsonSchemaCheck) -> None:
        import jsonschema  # type: ignore[import-untyped]  # no type hints; imported when configured

        if config.schema is not None:
            try:
                jsonschema.validators.validator_for(config.schema).check_schema(config.schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"schema is not a valid JSON schema: {exc.message}") from None
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._schema = config.schema

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when an answer text is not JSON, or does not match its schema."""
        import jsonschema

        tools = _tool_schemas(call)
        answer_schema = self._schema if self._schema is not None else _answer_schema(call)
        for place, text in zip(texts.places, texts.texts, strict=True):
            if place[0] == "arguments":
                schema: Any = tools.get(place[3]) if len(place) > 3 else None
            elif place[0] == "content":
                schema = answer_schema
            else:
                continue
            if schema is None:
                continue
            try:
                instance = json.loads(text)
            except ValueError:
                return Finding(flagged=True, reason="not JSON")
            try:
                valid = jsonschema.validators.validator_for(schema)(schema).is_valid(instance)
            except jsonschema.SchemaError:
                return Finding(failed=True, reason="the request's schema is not valid")
            if not valid:
                return Finding(flagged=True, reason="does not match the schema")
        return CLEAN


class PiiRedaction:
    """A request's own input check (orq's ``pii_redaction``): ``entities`` are redacted as
    ``<LABEL>`` (Presidio's labels, as orq writes them) before the call goes on."""

    __slots__ = ("_redactor", "config", "finder", "name")

    def __init__(self, entities: list[str]) -> None:
        order = [entity for entity in PRESIDIO_LABELS if entity in entities]
        scanner = Scanner([(entity, _PII_FINDERS[entity]) for entity in order])
        self.name = "pii_redaction"
        self.config: CheckConfig = PiiCheck(on="input", entities=order)  # type: ignore[arg-type]  # names checked above
        self.finder: Finder | None = None
        self._redactor = OutputRedactor(scanner, PRESIDIO_LABELS, lambda _: None, 0)

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """A replacement of every text when anything was redacted, else clean."""
        redacted = [self._redactor.whole(text) for text in texts.texts]
        if all(new is old for new, old in zip(redacted, texts.texts, strict=True)):
            return CLEAN
        return Finding(replacement=redacted)


def _answer_schema(call: Call) -> Any:
    """The schema ``call``'s ``response_format`` asks the answer to match: its JSON schema, an
    object for ``json_object``, None for text."""
    response_format = call.params.response_format
    if response_format is UNSET or not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
            return spec["schema"]
        return {}
    return None


def _tool_schemas(call: Call) -> dict[str, Any]:
    """The parameter schema of each tool ``call`` offers, by function name."""
    tools = call.params.tools
    if tools is UNSET or not tools:
        return {}
    return {
        tool.function.name: tool.function.parameters
        for tool in tools
        if isinstance(tool.function.parameters, dict)
    }


def _pii_finder(entities: list[str] | None) -> Finder:
    finders = [_PII_FINDERS[entity] for entity in (entities or _PII_FINDERS)]

    def find(view: TextView) -> list[Span]:
        spans: list[Span] = []
        for finder in finders:
            spans += finder(view)
        return spans

    return find


Builder = Callable[[str, Any, Mapping[str, Provider], Clients], Check]


def _regex(name: str, config: RegexCheck, providers: Any, clients: Clients) -> Check:
    if config.mode == "require":
        return RequiredPattern(name, config)
    return FinderCheck(name, config, pattern_finder(config.pattern))


def _moderation(
    name: str, config: ModerationCheck, providers: Mapping[str, Provider], clients: Clients
) -> Check:
    return Moderation(name, config, providers, clients)


BUILDERS: dict[type, Builder] = {
    RegexCheck: _regex,
    KeywordsCheck: lambda name, config, _, __: FinderCheck(
        name, config, words_finder(config.words)
    ),
    SecretsCheck: lambda name, config, _, __: FinderCheck(name, config, find_secrets),
    PiiCheck: lambda name, config, _, __: FinderCheck(name, config, _pii_finder(config.entities)),
    MaxTokensInCheck: lambda name, config, _, __: TokenCeiling(name, config),
    JsonSchemaCheck: lambda name, config, _, __: SchemaCheck(name, config),
    ModerationCheck: _moderation,
    WebhookCheck: lambda name, config, _, clients: Webhook(name, config, clients),
}
"""The registry: how each check type is built."""


def build_checks(
    configs: Mapping[str, CheckConfig], providers: Mapping[str, Provider], clients: Clients
) -> dict[str, Check]:
    """Every named check built; raises ValueError naming the first one that cannot be."""
    checks: dict[str, Check] = {}
    for name, config in configs.items():
        try:
            checks[name] = BUILDERS[type(config)](name, config, providers, clients)
        except ValueError as exc:
            raise ValueError(f"guardrails.{name}: {exc}") from None
    return checks
