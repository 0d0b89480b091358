"""Amazon Bedrock through the Converse API: ``POST /model/{modelId}/converse`` and
``/converse-stream``, signed with AWS Signature Version 4.

Requests: the Converse body is :func:`proxy.providers.bedrock.request.converse_body` (the
messages, inference config, tool config and passed-through Converse fields, and what it refuses
with a 400); this module signs it and sends it, with the configured ``headers`` and the
plugins' headers, which never replace its own or the signature's.

Responses and streams: text, tool calls and reasoning text become the canonical message or
deltas; stop reasons map to finish reasons (``guardrail_intervened`` and ``content_filtered`` →
``content_filter``); usage fills the disjoint buckets directly (Bedrock's ``inputTokens``
excludes cache reads and writes). Streams are AWS event-stream frames, decoded per stream
(:meth:`BedrockProvider.stream_decoder`) and translated per stream
(:meth:`BedrockProvider.stream_parser`: a tool call's index counts tool calls, not content
blocks), both by :mod:`proxy.providers.bedrock.stream`. A stream is complete at its
``metadata`` event; one that ends earlier was cut.

Errors: AWS error types (the ``x-amzn-ErrorType`` header, or the stream's exception events)
are classified — throttling → rate limited, service unavailable / model not ready →
overloaded, bad or expired credentials → upstream auth, a ``ValidationException`` about input
length → context window, about content filters → content policy.

Credentials and region come from the config, else from the standard AWS environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` or
``AWS_DEFAULT_REGION``), read once when the provider is built (a reload reads them again).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from msgspec import Struct

from proxy.core.canonical import Call, FunctionCall, MediaOperation, Message, ToolCall
from proxy.core.errors import (
    ContentPolicyViolation,
    ContextWindowExceeded,
    UpstreamAuthError,
    UpstreamClientError,
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRateLimited,
    upstream_error_for_status,
)
from proxy.core.reply import Choice, Chunk, Embeddings, MediaAnswer, Response
from proxy.providers.base import (
    HttpRequest,
    ProviderConfig,
    malformed,
    path_segment,
    retry_after_seconds,
)
from proxy.providers.bedrock.embeddings import embedding_bodies, parse_embedding_bodies
from proxy.providers.bedrock.media import (
    OPERATIONS,
    image_body,
    model_arn,
    parse_images,
    parse_rerank,
    rerank_body,
)
from proxy.providers.bedrock.request import converse_body
from proxy.providers.bedrock.sigv4 import Credentials, sign_headers
from proxy.providers.bedrock.stream import (
    ConverseStreamFrames,
    ConverseStreamParser,
    WireUsage,
    error_fields,
    finish_reason,
    new_id,
)

SIGNING_SERVICE = "bedrock"


class BedrockConfig(ProviderConfig, tag="bedrock", frozen=True, forbid_unknown_fields=True):
    """Amazon Bedrock (Converse API).

    ``region`` defaults to ``AWS_REGION`` (then ``AWS_DEFAULT_REGION``). The access key is
    ``access_key_id`` + ``secret_access_key`` (+ ``session_token`` for temporary credentials);
    when the config names no access key, all three come from ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``. Without a region and a complete key
    the provider is not ready. ``endpoint_url`` replaces
    ``https://bedrock-runtime.{region}.amazonaws.com`` (a VPC endpoint, a test server), and
    ``agent_endpoint_url`` replaces ``https://bedrock-agent-runtime.{region}.amazonaws.com``,
    where rerank goes. ``headers`` are sent (and signed) with every request.
    """

    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    endpoint_url: str | None = None
    agent_endpoint_url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Wire shapes (responses; stream events: bedrock_stream; requests are JSON values: bedrock_request)
# ---------------------------------------------------------------------------------------------


class _ToolUse(Struct, rename="camel"):
    tool_use_id: str
    name: str
    input: msgspec.Raw = msgspec.Raw(b"{}")


class _ReasoningText(Struct):
    text: str = ""


class _Reasoning(Struct, rename="camel"):
    reasoning_text: _ReasoningText | None = None


class _Block(Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolUse | None = None
    reasoning_content: _Reasoning | None = None


class _OutputMessage(Struct):
    content: list[_Block] = msgspec.field(default_factory=list)


class _Output(Struct):
    message: _OutputMessage | None = None


class _WireResponse(Struct, rename="camel"):
    output: _Output
    stop_reason: str = "end_turn"
    usage: WireUsage | None = None


_RESPONSE = msgspec.json.Decoder(_WireResponse)
_ENCODER = msgspec.json.Encoder()
_SIGNING_HEADERS = frozenset(
    {"authorization", "host", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
)
_CONTEXT_MARKERS = (
    "too long",
    "context length",
    "context window",
    "maximum context",
    "too many input tokens",
    "input tokens exceed",
)
_POLICY_MARKERS = ("content filter", "blocked by", "guardrail")
_AUTH_ERRORS = frozenset(
    {
        "accessdeniedexception",
        "unrecognizedclientexception",
        "invalidsignatureexception",
        "incompletesignatureexception",
        "expiredtokenexception",
        "missingauthenticationtokenexception",
    }
)
_OVERLOAD_ERRORS = frozenset({"serviceunavailableexception", "modelnotreadyexception"})
_SERVER_ERRORS = frozenset(
    {
        "internalserverexception",
        "modelstreamerrorexception",
        "modelerrorexception",
        "modeltimeoutexception",
    }
)


def _now() -> datetime:
    return datetime.now(UTC)


class BedrockProvider:
    """Pure translation for Bedrock Converse; see the module docstring.

    ``environ`` (default: the process environment) supplies what the config leaves out, read
    once here; ``clock`` gives the signing time. Rerank and image generation are served in
    Cohere's and OpenAI's shapes (:mod:`.media`).
    """

    media_operations: frozenset[MediaOperation] = OPERATIONS

    def __init__(
        self,
        name: str,
        config: BedrockConfig,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        env = os.environ if environ is None else environ
        self.name = name
        self.config = config
        region = config.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ""
        if config.access_key_id is not None:
            credentials = Credentials(
                config.access_key_id, config.secret_access_key or "", config.session_token
            )
        else:
            credentials = Credentials(
                env.get("AWS_ACCESS_KEY_ID", ""),
                env.get("AWS_SECRET_ACCESS_KEY", ""),
                env.get("AWS_SESSION_TOKEN") or None,
            )
        self.ready = bool(region and credentials.access_key_id and credentials.secret_access_key)
        self.secrets: tuple[str, ...] = tuple(
            secret
            for secret in (credentials.secret_access_key, credentials.session_token)
            if secret
        )
        self._credentials = credentials
        self._region = region
        self._clock = clock
        endpoint = config.endpoint_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        self._base = endpoint.rstrip("/") + "/model/"
        agent = config.agent_endpoint_url or f"https://bedrock-agent-runtime.{region}.amazonaws.com"
        self._rerank_url = agent.rstrip("/") + "/rerank"
        self._headers = {"content-type": "application/json", **config.headers}
        self._own_names = _SIGNING_HEADERS | {name.lower() for name in self._headers}

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        body = _ENCODER.encode(converse_body(call))
        # ':' stays literal (it is valid in a path, and HTTP clients do not re-encode it);
        # '/' (inference-profile ARNs) must be escaped. The URL signed is the URL sent.
        action = "/converse-stream" if call.stream else "/converse"
        url = self._base + path_segment(model, safe=":") + action
        return self._signed(url, body, call)

    def build_embeddings(self, call: Call, model: str) -> list[HttpRequest]:
        """An embeddings call: one ``InvokeModel`` request per body the model family needs
        (:mod:`.bedrock_embeddings`)."""
        url = self._base + path_segment(model, safe=":") + "/invoke"
        return [self._signed(url, body, call) for body in embedding_bodies(call, model)]

    def parse_embeddings(self, bodies: list[bytes], call: Call, model: str) -> Embeddings:
        """The vectors of the ``InvokeModel`` answers (:mod:`.bedrock_embeddings`)."""
        return parse_embedding_bodies(self.name, bodies, call, model)

    def build_media(self, call: Call, model: str) -> HttpRequest:
        """A rerank (the agent runtime's ``Rerank``) or an image generation (``InvokeModel``)
        call, signed (:mod:`.media`; see :meth:`proxy.providers.base.ServesMedia.build_media`)."""
        media = call.media
        assert media is not None  # a media call
        if media.operation == "rerank":
            return self._signed(
                self._rerank_url, rerank_body(call, model_arn(model, self._region)), call
            )
        url = self._base + path_segment(model, safe=":") + "/invoke"
        return self._signed(url, image_body(call), call)

    def parse_media(
        self, headers: Mapping[str, str], body: bytes, call: Call, model: str
    ) -> MediaAnswer:
        """Cohere's rerank answer or OpenAI's images from Bedrock's answer (:mod:`.media`)."""
        media = call.media
        assert media is not None  # a media call
        if media.operation == "rerank":
            return parse_rerank(self.name, body, call)
        return parse_images(self.name, body, call)

    def _signed(self, url: str, body: bytes, call: Call) -> HttpRequest:
        """A POST of ``body`` to ``url``, SigV4-signed, with the plugins' headers."""
        headers = self._headers
        if call.upstream_headers:
            # Plugin-set headers are signed too, but never replace the provider's own or the
            # signature's, whatever their case.
            own = self._own_names
            headers = {
                **{k: v for k, v in call.upstream_headers.items() if k.lower() not in own},
                **headers,
            }
        signed = sign_headers(
            "POST",
            url,
            headers,
            body,
            credentials=self._credentials,
            region=self._region,
            service=SIGNING_SERVICE,
            now=self._clock(),
        )
        return HttpRequest(url=url, headers=signed, body=body)

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        try:
            wire = _RESPONSE.decode(body)
        except msgspec.DecodeError as exc:
            raise malformed(self.name, "response", exc) from None
        texts: list[str] = []
        reasoning: list[str] = []
        tool_calls: list[ToolCall] = []
        blocks = wire.output.message.content if wire.output.message is not None else []
        for block in blocks:
            if block.text is not None:
                texts.append(block.text)
            elif block.tool_use is not None:
                tool = block.tool_use
                arguments = bytes(tool.input).decode("utf-8")
                tool_calls.append(
                    ToolCall(tool.tool_use_id, FunctionCall(tool.name, arguments=arguments))
                )
            elif block.reasoning_content is not None and block.reasoning_content.reasoning_text:
                reasoning.append(block.reasoning_content.reasoning_text.text)
        message = Message(role="assistant", content="".join(texts) if texts else None)
        if tool_calls:
            message.tool_calls = tool_calls
        if reasoning:
            message.reasoning_content = "".join(reasoning)
        return Response(
            id=new_id(),
            model=model,
            choices=[Choice(0, message, finish_reason(wire.stop_reason, bool(tool_calls)))],
            created=int(time.time()),
            usage=wire.usage.canonical() if wire.usage is not None else None,
        )

    def stream_decoder(self) -> ConverseStreamFrames:
        """A fresh decoder of one stream's event-stream frames (used by the transport)."""
        return ConverseStreamFrames(self.name)

    def stream_parser(self) -> ConverseStreamParser:
        """A fresh translator of one stream's events (used by the transport)."""
        return ConverseStreamParser(self)

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """One event translated on its own; streams use :meth:`stream_parser`, which keeps the
        state (tool-call numbering) that events of one stream share."""
        return self.stream_parser().parse_event(event, data)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """See :meth:`proxy.providers.base.HttpProvider.parse_error`."""
        message, body_kind = error_fields(body)
        kind = headers.get("x-amzn-errortype", "").split(":", 1)[0] or body_kind
        return self.classify(kind, message, status, retry_after_seconds(headers))

    def classify(
        self, kind: str, message: str, status: int, retry_after: float | None = None
    ) -> UpstreamError:
        """The gateway error for AWS error type ``kind`` (e.g. ``ThrottlingException``)."""
        message = message or f"upstream answered HTTP {status}" + (f" ({kind})" if kind else "")
        key = kind.lower()
        common: dict[str, Any] = {"upstream_status": status, "provider": self.name}
        if key == "throttlingexception":
            return UpstreamRateLimited(message, retry_after=retry_after, **common)
        if key in _OVERLOAD_ERRORS:
            return UpstreamOverloaded(message, retry_after=retry_after, **common)
        if key in _AUTH_ERRORS:
            return UpstreamAuthError(message, status=502, **common)
        if key == "validationexception":
            lowered = message.lower()
            if any(marker in lowered for marker in _CONTEXT_MARKERS):
                return ContextWindowExceeded(message, status=400, **common)
            if any(marker in lowered for marker in _POLICY_MARKERS):
                return ContentPolicyViolation(message, status=400, **common)
            return UpstreamClientError(message, status=400, code=kind, **common)
        if key in _SERVER_ERRORS:
            return UpstreamError(message, code=kind, **common)
        return upstream_error_for_status(
            status, message, provider=self.name, retry_after=retry_after, code=kind or None
        )
