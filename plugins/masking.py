"""``masking``: keep PII and secrets away from upstream models, in process.

Before the call goes on, the texts of the listed ``roles`` are scanned for the configured
``entities`` (and the operator's ``custom`` patterns and word lists) and each value is handled
by its entity's action: ``mask`` (a placeholder, restored in the reply), ``redact`` (for good),
``hash`` (a keyed hash, needs ``hash_key``) or ``block`` (the request is refused with 400
``pii_blocked``, naming the entity types found, never a value, and nothing is sent). The masked
call stays in place for the inner links, so a cache keys on masked text. An embeddings call's
text inputs are scanned as user messages (when ``user`` is among the roles): the embedding
provider sees placeholders, and nothing is restored (the answer is vectors); a media call's texts
likewise (speech's input, a moderation's input, image and transcription prompts, a rerank's query
and documents: the answer is audio, images, scores). ``output`` says what
happens to the reply: ``restore`` placeholders (default), ``scan`` (also redact values the model
writes itself), or ``none``. See :mod:`proxy.pii` for detection, placeholders and restoring.

Per-request controls (orq's, carried by the dialect) can only add masking: each
``call.options.pii`` entry (``{"id": "pii_redaction", "entities": [...] | None, "on_failure":
"block" | "passthrough"}``) masks those entities (all built-in ones when None) with orq's
labels (``<EMAIL_ADDRESS_1>``), restored in the reply; an entity this gateway cannot detect is a
400 ``pii_entity_unsupported`` unless that entry says ``passthrough``. ``call.options.mask``
(orq's ``security.mask``) asks for what is stored or logged to be masked: the payload still goes
to the provider; the gateway stores and logs no payload, but an upstream error message (which
the access log records) may echo the input, so it is redacted.

Failure policy, the one thing this link owns: a detector that raises blocks the request with
500 ``pii_detection_failed`` (fail closed), unless ``on_error: passthrough`` is set and no
per-request entry asks to block, in which case the call goes on unmasked. Either way the
failure is logged (its exception type only). Every value found is counted in
``crossway_pii_detections_total{entity, action}`` (``action="redact_output"`` for values the
output scan redacted) and each request with detections logs one ``pii_detected`` line with
counts per entity, never a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call, GatewayOptions, MediaRequest, Message
from proxy.core.errors import BadRequest, GatewayError, InternalError
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.pii.custom import pattern_finder, words_finder
from proxy.pii.detectors import BUILTIN_FINDERS, Finder
from proxy.pii.labels import PRESIDIO_LABELS, REQUEST_NAMES
from proxy.pii.request import Findings, Rule, mask_messages
from proxy.pii.restore import OutputRedactor, Rewriter
from proxy.pii.scanner import Scanner
from proxy.pii.secrets import find_secrets
from proxy.pii.stream import ChunkRewriter, RewritingStream
from proxy.pii.vault import Action, Replacer, Vault
from proxy.runtime.plugins import PluginContext

Entity = Literal["email", "phone", "credit_card", "iban", "us_ssn", "ip_address", "secret"]
ScannedRole = Literal["system", "developer", "user", "assistant", "tool"]

# Built-in entities in the order they win ties (see proxy.pii.scanner), with their labels.
_BUILTIN_LABELS: dict[str, str] = {
    "secret": "SECRET",
    "email": "EMAIL",
    "credit_card": "CREDIT_CARD",
    "iban": "IBAN",
    "us_ssn": "US_SSN",
    "ip_address": "IP_ADDRESS",
    "phone": "PHONE",
}
# Per-request entity names: Presidio's, as orq uses them, and this gateway's own; the label a
# per-request entity's placeholders carry is Presidio's.
_REQUEST_LABELS = PRESIDIO_LABELS
_REQUEST_NAMES = REQUEST_NAMES


class CustomEntity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An operator's entity: ``pattern`` (a regular expression) or ``words`` (whole words, any
    case), exactly one of them."""

    name: Annotated[str, Meta(pattern="^[a-z][a-z0-9_]{0,31}$")]
    action: Action = "mask"
    pattern: str | None = None
    words: list[str] | None = None


class MaskingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. ``scan_window``: characters of streamed output held back while
    ``output: scan`` looks for values split across chunks."""

    entities: dict[Entity, Action] = msgspec.field(default_factory=dict)
    custom: list[CustomEntity] = msgspec.field(default_factory=list)
    roles: list[ScannedRole] = msgspec.field(default_factory=lambda: ["system", "user", "tool"])
    output: Literal["restore", "scan", "none"] = "restore"
    on_error: Literal["block", "passthrough"] = "block"
    hash_key: Annotated[str, Meta(min_length=16)] | None = None
    scan_window: Annotated[int, Meta(ge=64, le=4096)] = 128


class MaskingPlugin:
    """See the module docstring. ``finders`` replaces built-in detectors by entity name (tests
    inject a failing one to prove the failure policy)."""

    Options = MaskingConfig

    def __init__(
        self,
        options: MaskingConfig,
        context: PluginContext,
        *,
        finders: Mapping[str, Finder] | None = None,
    ) -> None:
        self._finders: dict[str, Finder] = {
            **BUILTIN_FINDERS,
            "secret": find_secrets,
            **(finders or {}),
        }
        self._order = list(_BUILTIN_LABELS)
        labels = dict(_BUILTIN_LABELS)
        rules: dict[str, Rule] = {
            entity: Rule(action, labels[entity]) for entity, action in options.entities.items()
        }
        for custom in options.custom:
            if custom.name in labels:
                raise ValueError(f"custom entity {custom.name!r} is already defined")
            if (custom.pattern is None) == (custom.words is None):
                raise ValueError(f"custom entity {custom.name!r}: give one of pattern, words")
            self._finders[custom.name] = (
                pattern_finder(custom.pattern)
                if custom.pattern is not None
                else words_finder(custom.words or ())
            )
            self._order.append(custom.name)
            labels[custom.name] = custom.name.upper()
            rules[custom.name] = Rule(custom.action, labels[custom.name])
        if options.hash_key is None and any(rule.action == "hash" for rule in rules.values()):
            raise ValueError("the hash action needs hash_key (16 characters or more)")
        self._labels = labels
        self._rules = rules
        self._roles = frozenset(options.roles) | (
            {"system"} if "developer" in options.roles else set()
        )
        self._output = options.output
        self._fail_closed = options.on_error == "block"
        self._window = options.scan_window
        self._replacer = Replacer(options.hash_key.encode() if options.hash_key else None)
        self._scanners: dict[frozenset[str], Scanner] = {}
        self._metrics = context.metrics
        self._logger = context.logger

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Mask ``call``, send it on, rewrite the reply. Raises 400 ``pii_blocked`` (nothing
        sent), 400 ``pii_entity_unsupported`` for a per-request entity it cannot detect, 500
        ``pii_detection_failed`` when a detector fails closed; otherwise what ``next`` raises."""
        rules, fail_closed = self._request_rules(call.options)
        if not rules:
            return await self._send(call, next, None)
        media = _media_texts(call.media) if call.media is not None else None
        texts = call.embedding.texts if call.embedding is not None else None
        if media is not None:
            texts = [text for _, _, text in media]
        messages = call.messages if texts is None else _as_user_messages(texts)
        try:
            masked = mask_messages(
                messages, self._scanner(rules), rules, self._roles, self._replacer
            )
        except Exception as exc:  # a detector bug: the failure policy decides
            self._logger.error(
                "pii_detection_failed",
                request_id=call.request_id,
                error=type(exc).__name__,
                blocked=fail_closed,
            )
            if fail_closed:
                raise InternalError(
                    "PII detection failed, so the request was not sent",
                    code="pii_detection_failed",
                ) from None
            return await self._send(call, next, None)
        self._record(call, masked.findings)
        if masked.findings.blocked:
            error = BadRequest(
                "the request contains "
                + ", ".join(sorted(masked.findings.blocked))
                + ", which this gateway does not send to models",
                code="pii_blocked",
            )
            error.attempts = 0
            raise error
        if texts is None:
            call.messages = masked.messages
        elif call.media is not None and media is not None:  # its texts, masked as user text
            call.media = _with_texts(call.media, media, masked.messages)
        else:  # an embeddings call: its inputs are masked as user text
            embedding = call.embedding
            assert embedding is not None  # its texts are what was masked
            call.embedding = msgspec.structs.replace(
                embedding, texts=[message.text() for message in masked.messages]
            )
        return await self._send(call, next, masked.vault)

    async def _send(self, call: Call, next: Next, vault: Vault | None) -> Reply:
        try:
            reply = await next(call)
        except GatewayError as error:
            if call.options.mask:
                self._redact_error(error)
            raise
        restore = vault if vault and self._output != "none" else None
        redactor = self._output_redactor if self._output == "scan" else None
        if restore is None and redactor is None:
            return reply
        rewriter = Rewriter(restore, redactor)
        if reply.response is not None:
            reply.response = rewriter.response(reply.response)
        elif reply.stream is not None:
            reply.stream = RewritingStream(reply.stream, ChunkRewriter(rewriter))
        return reply

    def _request_rules(self, options: GatewayOptions) -> tuple[dict[str, Rule], bool]:
        """The operator's rules plus what the request's own controls add, and whether a
        detector failure blocks."""
        if not options.pii:
            return self._rules, self._fail_closed
        rules = dict(self._rules)
        fail_closed = self._fail_closed
        for position, entry in enumerate(options.pii):
            blocks = entry.get("on_failure", "block") != "passthrough"
            fail_closed = fail_closed or blocks
            names = entry.get("entities")
            for index, name in enumerate(_REQUEST_LABELS if names is None else names):
                entity = _REQUEST_NAMES.get(str(name).lower())
                if entity is None:
                    if blocks:
                        field = f"plugins[{position}].entities[{index}]"
                        raise BadRequest(
                            f"{field}: {name!r} is not an entity this gateway detects (it "
                            f"detects {', '.join(sorted(_REQUEST_LABELS.values()))})",
                            param=field,
                            code="pii_entity_unsupported",
                        )
                    continue
                rules.setdefault(entity, Rule("mask", _REQUEST_LABELS[entity]))
        return rules, fail_closed

    def _scanner(self, rules: Mapping[str, Rule]) -> Scanner:
        entities = frozenset(rules)
        scanner = self._scanners.get(entities)
        if scanner is None:
            order = [entity for entity in self._order if entity in entities]
            scanner = Scanner([(entity, self._finders[entity]) for entity in order])
            self._scanners[entities] = scanner
        return scanner

    def scrub(self, text: str) -> str:
        """``text`` as ``output: scan`` would let it out: every value the operator's entities
        find in it redacted (``<LABEL>``, uncounted); unchanged under ``restore`` or ``none``.
        What the request logs apply to a kept answer, which they take before this plugin
        rewrites it (:mod:`proxy.request_logs.capture`)."""
        if self._output != "scan":
            return text
        redactor = OutputRedactor(self._scanner(self._rules), self._labels, lambda _: None, 0)
        return redactor.whole(text)

    def _output_redactor(self) -> OutputRedactor:
        return OutputRedactor(
            self._scanner(self._rules), self._labels, self._count_output, self._window
        )

    def _count_output(self, entity: str) -> None:
        self._metrics.pii_detections(entity, "redact_output").inc()

    def _record(self, call: Call, findings: Findings) -> None:
        if not findings.counts:
            return
        per_entity: dict[str, int] = {}
        for (entity, action), count in findings.counts.items():
            self._metrics.pii_detections(entity, action).inc(count)
            per_entity[entity] = per_entity.get(entity, 0) + count
        fields: dict[str, Any] = {"request_id": call.request_id, "entities": per_entity}
        if findings.blocked:
            fields["blocked"] = sorted(findings.blocked)
        self._logger.info("pii_detected", **fields)

    def _redact_error(self, error: GatewayError) -> None:
        """Redact every built-in entity in ``error``'s message (``security.mask``)."""
        everything = {entity: Rule("redact", label) for entity, label in _BUILTIN_LABELS.items()}
        redactor = OutputRedactor(self._scanner(everything), self._labels, lambda _: None, 0)
        error.message = redactor.whole(error.message)
        error.args = (error.message,)


_MEDIA_TEXTS = ("input", "prompt", "query", "instructions", "documents")
"""The fields of a media call whose text a model reads: speech's ``input`` and
``instructions``, a moderation's ``input`` (strings, or ``{"type": "text", "text"}`` parts), an
image or transcription ``prompt``, a rerank's ``query`` and ``documents`` (strings or
``{"text"}`` objects)."""

MediaText = tuple[str, int | None, str]
"""Where one text of a media call is (its field, its index in a list field or None) and the
text."""


def _media_texts(media: MediaRequest) -> list[MediaText]:
    """Every text of ``media`` a model reads (:data:`_MEDIA_TEXTS`), in field order."""
    found: list[MediaText] = []
    for name in _MEDIA_TEXTS:
        value = media.fields.get(name)
        if isinstance(value, str):
            found.append((name, None, value))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, str):
                    found.append((name, index, item))
                elif isinstance(item, dict) and isinstance(item.get("text"), str):
                    found.append((name, index, item["text"]))
    return found


def _with_texts(media: MediaRequest, where: list[MediaText], masked: list[Message]) -> MediaRequest:
    """``media`` with each text of ``where`` replaced by its masked message's (a new fields
    mapping: the client's stays as it was)."""
    fields = dict(media.fields)
    for (name, index, _), message in zip(where, masked, strict=True):
        text = message.text()
        if index is None:
            fields[name] = text
            continue
        items = fields[name] = list(fields[name])
        item = items[index]
        items[index] = {**item, "text": text} if isinstance(item, dict) else text
    return msgspec.structs.replace(media, fields=fields)


def _as_user_messages(texts: list[str]) -> list[Message]:
    """An embeddings call's inputs as user messages, for the scanner."""
    return [Message(role="user", content=text) for text in texts]
