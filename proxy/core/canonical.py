"""Canonical requests: the one language every part of the gateway speaks (replies are
:mod:`proxy.core.reply`).

Dialects decode client bytes into a :class:`Call` and encode a :class:`Reply` back; providers turn a
:class:`Call` into an upstream request and an upstream answer into a :class:`Response` or a stream
of :class:`Chunk`; plugins read and wrap both. The shapes follow OpenAI chat completions (the
lingua franca), so that an OpenAI-compatible round trip is a straight copy, except for token usage,
which is normalised into disjoint buckets (:class:`Usage`) so that cost is exact whatever a
provider reports.

This module imports nothing else of the project.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


# ---------------------------------------------------------------------------------------------
# Messages and content
# ---------------------------------------------------------------------------------------------


class TextPart(Struct, tag="text", tag_field="type", omit_defaults=True):
    """A text content part."""

    text: str


class ImageURL(Struct, omit_defaults=True):
    """An image reference: an http(s) URL or a ``data:`` URL with base64 bytes."""

    url: str
    detail: str | UnsetType = UNSET


class ImagePart(Struct, tag="image_url", tag_field="type", omit_defaults=True):
    """An image content part."""

    image_url: ImageURL


class InputAudio(Struct):
    """Base64 audio input."""

    data: str
    format: str


class AudioPart(Struct, tag="input_audio", tag_field="type", omit_defaults=True):
    """An audio content part."""

    input_audio: InputAudio


class FilePart(Struct, tag="file", tag_field="type", omit_defaults=True):
    """A file content part (kept opaque: ``file_id`` / ``file_data`` / ``filename``)."""

    file: dict[str, Any]


class RefusalPart(Struct, tag="refusal", tag_field="type", omit_defaults=True):
    """A refusal content part (assistant messages only)."""

    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart


class FunctionCall(Struct):
    """The function a tool call invokes; ``arguments`` is JSON text as the model produced it."""

    name: str
    arguments: str = ""


class ToolCall(Struct):
    """A complete tool call made by the model."""

    id: str
    function: FunctionCall
    type: str = "function"


class Message(Struct):
    """One conversation turn. ``content`` is text, a list of parts, or null (tool-call turns).

    ``content`` is always encoded (as ``null`` when absent, as OpenAI does); every other optional
    field only when set. ``annotations`` are what an answer cites, as OpenAI's objects
    (``{"type": "url_citation", "url_citation": {start_index, end_index, url, title}}``), kept
    whole whatever their type; they belong to answers, and providers do not send them upstream.
    """

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET
    refusal: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET
    annotations: list[dict[str, Any]] | UnsetType | None = UNSET

    def text(self) -> str:
        """The message's text: the string content, or its text parts joined; ``""`` if none."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "".join(part.text for part in content if isinstance(part, TextPart))


class FunctionDefinition(Struct, omit_defaults=True):
    """A callable function offered to the model; ``parameters`` is a JSON Schema object."""

    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class Tool(Struct):
    """A tool offered to the model (only function tools are routed through the gateway)."""

    function: FunctionDefinition
    type: Literal["function"] = "function"


# ---------------------------------------------------------------------------------------------
# Usage
# ---------------------------------------------------------------------------------------------


class MediaUnits(Struct, frozen=True, omit_defaults=True):
    """What an audio, image or rerank call bills beyond tokens: ``audio_seconds`` of audio
    transcribed or translated, ``characters`` of text spoken, ``images`` made (of
    ``image_size`` / ``image_quality``, empty when not known) and rerank ``search_units``."""

    audio_seconds: float = 0.0
    characters: int = 0
    images: int = 0
    image_size: str = ""
    image_quality: str = ""
    search_units: int = 0


class Usage(Struct, omit_defaults=True):
    """Token usage in disjoint buckets: their sum is everything the provider billed.

    ``input`` excludes cache reads and writes; ``output`` excludes ``reasoning``. Providers fill
    these from their own counts (e.g. OpenAI's ``prompt_tokens`` includes cached tokens, Anthropic's
    ``input_tokens`` does not), so a price per bucket gives an exact cost whatever the provider.
    ``cost_usd`` is set only when the provider itself reported the cost; ``media`` holds the
    units of an audio, image or rerank call (:class:`MediaUnits`).
    """

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0
    cost_usd: float | None = None
    media: MediaUnits | None = None

    @property
    def prompt_tokens(self) -> int:
        """Input tokens as OpenAI counts them (cache reads and writes included)."""
        return self.input + self.cache_read + self.cache_write

    @property
    def completion_tokens(self) -> int:
        """Output tokens as OpenAI counts them (reasoning included)."""
        return self.output + self.reasoning

    @property
    def total_tokens(self) -> int:
        """Every token billed (:attr:`prompt_tokens` + :attr:`completion_tokens`)."""
        return self.input + self.cache_read + self.cache_write + self.output + self.reasoning


# ---------------------------------------------------------------------------------------------
# The call
# ---------------------------------------------------------------------------------------------


MAX_TOKENS_LIMIT = 2**31 - 1
"""The largest token limit (``max_tokens`` …) a client may ask for: no model comes near it, and
upstreams keep the number in 32 bits (a larger one would reach them only to be refused)."""

Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
"""A sampling seed: OpenAI's schema makes it an int64 and no upstream takes a wider one, so a
seed beyond 64 bits is refused where it is decoded (a 400 naming ``seed``)."""


class Params(Struct, omit_defaults=True):
    """Generation parameters understood by the gateway; each is absent (UNSET) unless given.

    Bounds are checked when a dialect decodes them (a 400 naming the field). Fields a dialect
    does not know are kept raw in :attr:`Call.extra` and passed to providers that accept them.
    """

    temperature: Annotated[float, Meta(ge=0, le=2)] | UnsetType | None = UNSET
    top_p: Annotated[float, Meta(ge=0, le=1)] | UnsetType | None = UNSET
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)] | UnsetType | None = UNSET
    max_completion_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)] | UnsetType | None = (
        UNSET
    )
    n: Annotated[int, Meta(ge=1, le=128)] | UnsetType | None = UNSET
    stop: str | list[str] | UnsetType | None = UNSET
    seed: Seed | UnsetType | None = UNSET
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | UnsetType | None = UNSET
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | UnsetType | None = UNSET
    logit_bias: dict[str, float] | UnsetType | None = UNSET
    logprobs: bool | UnsetType | None = UNSET
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | UnsetType | None = UNSET
    user: str | UnsetType = UNSET
    tools: list[Tool] | UnsetType | None = UNSET
    tool_choice: str | dict[str, Any] | UnsetType | None = UNSET
    parallel_tool_calls: bool | UnsetType | None = UNSET
    response_format: dict[str, Any] | UnsetType | None = UNSET
    reasoning_effort: str | UnsetType | None = UNSET


class Deployment(Struct, frozen=True):
    """One place a model can be served: a provider instance and the model name it knows.

    ``weight`` steers weighted load balancing among the deployments of one alias.
    """

    provider: str
    model: str
    weight: float = 1.0

    @property
    def target(self) -> str:
        """``provider/model``: how clients address this deployment directly."""
        return f"{self.provider}/{self.model}"


class RetryOptions(Struct, frozen=True):
    """Per-request retry control: up to ``count`` retries on these upstream statuses."""

    count: int = 3
    on_codes: tuple[int, ...] = (429, 500, 502, 503, 504)


class CacheOptions(Struct, frozen=True):
    """Per-request cache control: entry lifetime in seconds and the match type."""

    ttl: int = 1800
    type: str = "exact_match"


class WeightedTarget(Struct, frozen=True):
    """A model (alias or ``provider/model``) with a load-balancing weight."""

    model: str
    weight: float = 1.0


class GatewayOptions(Struct):
    """Gateway controls a client sent with its request, for the plugins that honour them.

    Every field is None when the client did not set it; plugins apply their configured limits
    on top (a client never exceeds what the operator allows).

    - ``fallbacks``: models (alias or ``provider/model``) to try in order after the primary fails.
    - ``retry``: per-request retry policy.
    - ``cache``: per-request cache policy; ``no_cache`` skips the cache for this request.
    - ``load_balancer``: weighted models to pick the primary from.
    - ``timeout``: seconds the whole call (all attempts) may take.
    - ``provider``: pin the call to this provider.
    - ``mask``: parts to mask in stored traces and logs (input, output, system, all).
    - ``pii``: PII redaction requests (plugin-specific dicts).
    - ``metadata``: who and which conversation (identity, thread, tags) — for logs, never labels.
    """

    fallbacks: list[str] | None = None
    retry: RetryOptions | None = None
    cache: CacheOptions | None = None
    no_cache: bool = False
    load_balancer: list[WeightedTarget] | None = None
    timeout: float | None = None
    provider: str | None = None
    mask: frozenset[str] | None = None
    pii: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None


class RateLimits(Struct, frozen=True):
    """Limits of one key or one team; None is unlimited.

    ``rpm``: requests per minute; ``tpm``: input + output tokens per minute; ``max_parallel``:
    requests in flight at once. A team's limits are shared by every key of the team.
    """

    rpm: int | None = None
    tpm: int | None = None
    max_parallel: int | None = None


BudgetPeriod = Literal["1d", "7d", "30d", "1mo", "lifetime"]
BudgetUSD = Annotated[float, Meta(gt=0, le=1e9)]
"""A budget's dollars: at most a billion, so that its nano-dollars (at most 10¹⁸) stay exact
64-bit integers in every counter and column."""


class Budget(Struct, frozen=True, forbid_unknown_fields=True):
    """A spending limit of a key, a team or an end user: at most ``max_usd`` per ``period``
    (``1d``, ``7d``, ``30d``, ``1mo``, ``lifetime``; see :mod:`proxy.governance.budgets.counters`
    for when each resets); spending past ``soft_usd`` raises an alert."""

    max_usd: BudgetUSD
    period: BudgetPeriod = "1mo"
    soft_usd: BudgetUSD | None = None


class Principal(Struct, frozen=True):
    """Who is calling, as the ``auth`` plugin established it; every field None when anonymous.

    Later plugins read it from :attr:`Call.principal`: ``limits`` counts per key and team,
    ``cost`` charges and enforces budgets, ``cache`` scopes entries, the access log and the
    ledger record it. ``key_id`` is the virtual key's stable id (never the key itself),
    ``key_alias`` its human name, ``team`` its team's id, ``user`` the user the key belongs to.
    ``models`` are the models (aliases or ``provider/model``; ``provider/*`` for all of a
    provider's) it may use, the key's and its team's lists intersected; None means all.
    ``limits`` are the key's own, ``team_limits`` its team's (counted for the whole team).
    ``budget`` is the key's own budget, ``team_budget`` its team's (shared by all its keys),
    ``user_budget`` the one each end user a request names gets (``auth.user_budget``).
    ``request_logs`` is what the request logs keep of its requests (``none``, ``metadata``,
    ``payloads``): the key's own setting, else its team's; None: ``telemetry.request_logs``.
    ``guardrails`` are the checks the key's and its team's records name (their metadata's
    ``guardrails`` list), which the ``guardrails`` plugin runs on every request of the key.
    ``mcp`` and ``team_mcp`` are the key's and its team's MCP grants (:meth:`allows_tool`).
    Without the ``auth`` plugin every call carries :data:`ANONYMOUS`: the gateway is open.
    """

    key_id: str | None = None
    key_alias: str | None = None
    team: str | None = None
    user: str | None = None
    models: frozenset[str] | None = None
    limits: RateLimits | None = None
    team_limits: RateLimits | None = None
    budget: Budget | None = None
    team_budget: Budget | None = None
    user_budget: Budget | None = None
    request_logs: Literal["none", "metadata", "payloads"] | None = None
    guardrails: tuple[str, ...] = ()
    mcp: frozenset[str] | None = None
    team_mcp: frozenset[str] | None = None

    def allows(self, model: str) -> bool:
        """Whether this principal may use ``model`` (an alias or ``provider/model``)."""
        models = self.models
        if models is None or model in models:
            return True
        provider, slash, _ = model.partition("/")
        return bool(slash) and f"{provider}/*" in models

    def allows_tool(self, server: str, tool: str | None = None) -> bool:
        """Whether this principal may use MCP ``server`` (with ``tool`` given: that tool of it).

        ``mcp`` (the key's) and ``team_mcp`` (its team's) each hold ``server/tool`` and
        ``server/*`` grants; None means every server and tool. Both must allow it."""
        return _grants_allow(self.mcp, server, tool) and _grants_allow(self.team_mcp, server, tool)


def _grants_allow(grants: frozenset[str] | None, server: str, tool: str | None) -> bool:
    if grants is None or f"{server}/*" in grants:
        return True
    if tool is None:
        prefix = f"{server}/"
        return any(grant.startswith(prefix) for grant in grants)
    return f"{server}/{tool}" in grants


ANONYMOUS = Principal()


class Timings(Struct):
    """Clocks of one request, in seconds (``time.perf_counter``).

    ``upstream_wait`` accumulates the time spent waiting on upstreams (every attempt, and every
    chunk of a stream), so the gateway's own overhead is ``total - upstream_wait``.
    ``first_token`` is the delay from the request's start to the first streamed token, if any.
    """

    start: float
    upstream_wait: float = 0.0
    first_token: float | None = None


CostSource = Literal["authoritative", "estimated"]
CacheResult = Literal["hit", "miss", "bypass"]


class Accounting(Struct):
    """How one client request was served and what it cost: what the spend ledger records.

    One object per client request, made with its :class:`Call` and shared by every copy that
    plugins pass down the chain (``msgspec.structs.replace`` copies the reference), so that
    what an inner link records is seen by the app when it finalises the request, whichever
    link answered or failed. Every field is None until the plugin that knows it sets it:

    - ``cost_nanos``: what the request is charged, in nano-dollars (10⁻⁹ USD, an exact
      integer). Set by the ``cost`` plugin once the reply is whole, or when its stream ends,
      fails or is closed (before the stream reports its end to outer links). None means
      unknown: no ``cost`` plugin, a model without a price, or no upstream answer.
    - ``cost_source``: ``"authoritative"`` when the provider billed the amount itself
      (OpenRouter's ``usage.cost``), ``"estimated"`` when the gateway priced the usage.
    - ``usage``: the usage charged when the reply did not report it (an estimate for a stream
      the client abandoned); None when the reply's own usage was charged.
    - ``cache``: the response cache's verdict, ``"hit"``, ``"miss"`` or ``"bypass"``. A cache
      answering from an entry sets ``"hit"`` and ``saved_nanos``; the request then costs 0
      (no upstream call was made), which the ledger records.
    - ``saved_nanos``: on a cache hit, the cost of the original answer (stored with the
      entry, from ``cost_nanos`` of the request that filled it): what the hit saved.
    - ``fallback``: the model (alias or ``provider/model``) that served after a fallback.
    - ``batch_id``: the batch this request is a line of (:mod:`proxy.batches`), set by the
      batch executor before the chain runs.
    - ``guardrails``: the ``guardrails`` plugin's verdicts, ``{check, phase, verdict}`` each,
      in the order they were made (see :mod:`proxy.guardrails.engine`).
    """

    cost_nanos: int | None = None
    cost_source: CostSource | None = None
    usage: Usage | None = None
    cache: CacheResult | None = None
    saved_nanos: int | None = None
    fallback: str | None = None
    batch_id: str | None = None
    guardrails: list[dict[str, str]] | None = None


EncodingFormat = Literal["float", "base64"]


class EmbeddingRequest(Struct):
    """What an embeddings call asks for: vectors for ``texts``, or for ``tokens`` (token-id
    lists), exactly one of which is set and non-empty (the dialect checks).

    ``encoding_format`` is how the client wants the vectors written (the dialect's business:
    providers always return floats); ``dimensions`` asks for shortened vectors, when the model
    supports it (None: the model's own size).
    """

    texts: list[str] | None = None
    tokens: list[list[int]] | None = None
    encoding_format: EncodingFormat = "float"
    dimensions: int | None = None

    @property
    def count(self) -> int:
        """How many vectors are asked for."""
        return len(self.texts if self.texts is not None else self.tokens or ())

    def estimated_tokens(self) -> int:
        """The input's tokens: exact for token lists, one per four characters of text (at
        least one per text) otherwise."""
        if self.tokens is not None:
            return sum(len(tokens) for tokens in self.tokens)
        return sum(max(1, -(-len(text) // 4)) for text in self.texts or ())


MediaOperation = Literal[
    "speech",
    "transcription",
    "translation",
    "image_generation",
    "image_edit",
    "moderation",
    "rerank",
]
"""The operations of the media routes (``/v1/audio/*``, ``/v1/images/*``, ``/v1/moderations``,
``/v1/rerank``)."""


class MediaFile(Struct, frozen=True):
    """One file of a multipart request: its form ``field`` (``file``, ``image``, ``mask``),
    the ``filename`` and ``content_type`` the client gave, and its bytes."""

    field: str
    filename: str
    content_type: str
    data: bytes


class MultipartForm(Struct):
    """A ``multipart/form-data`` request as read: its text ``fields`` (a repeated field as a
    list, in order) and its ``files``."""

    fields: dict[str, str | list[str]]
    files: list[MediaFile]


class MediaRequest(Struct):
    """What a media call asks for: ``operation``, the request's ``fields`` (the JSON body's
    members, or a multipart form's text fields as strings, a repeated field as a list; the
    model is :attr:`Call.model`, never among them) and its ``files``. ``worst`` is the most it
    can bill, known from the request alone (None when it cannot be known: a transcription's
    audio length); ``tokens`` its text's estimated tokens (rate limits)."""

    operation: MediaOperation
    fields: dict[str, Any]
    files: list[MediaFile] = msgspec.field(default_factory=list)
    worst: MediaUnits | None = None
    tokens: int = 0


class Call(Struct):
    """One client request in canonical form, passed explicitly through the plugin chain.

    A Call is owned by one request; plugins may change it in place or pass a
    :func:`msgspec.structs.replace` copy to ``next``. ``model`` is what the client asked for (an
    alias or ``provider/model``); ``deployments`` are the candidates the router resolved for it,
    and ``deployment`` is the one a plugin chose (the upstream picks by weight if none did).
    ``extra`` holds request fields the dialect did not model, as raw JSON, to pass through.
    ``options`` holds gateway controls a dialect carried in the body (fallbacks, retry, …) for
    the plugins that honour them. ``dialect_state`` is private to the dialect that decoded the
    call (what it needs again to encode the reply); nothing else reads it. ``principal`` is who
    is calling (:data:`ANONYMOUS` until the ``auth`` plugin says otherwise). ``accounting``
    is the request's :class:`Accounting`, shared by every copy of the call. ``embedding`` is
    set, and ``messages`` empty, for an embeddings call: its reply carries
    :attr:`Reply.embeddings` instead of a chat response or stream. ``media`` is set, and
    ``messages`` empty, for an audio, image, moderation or rerank call: its reply carries
    :attr:`Reply.media`.
    """

    request_id: str
    dialect: str
    model: str
    messages: list[Message]
    stream: bool = False
    include_usage: bool = False
    params: Params = msgspec.field(default_factory=Params)
    extra: dict[str, Raw] = msgspec.field(default_factory=dict)
    options: GatewayOptions = msgspec.field(default_factory=GatewayOptions)
    dialect_state: dict[str, Any] = msgspec.field(default_factory=dict)
    client_headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    upstream_headers: dict[str, str] = msgspec.field(default_factory=dict)
    deployments: list[Deployment] = msgspec.field(default_factory=list)
    deployment: Deployment | None = None
    principal: Principal = ANONYMOUS
    timings: Timings = msgspec.field(default_factory=lambda: Timings(start=time.perf_counter()))
    accounting: Accounting = msgspec.field(default_factory=Accounting)
    embedding: EmbeddingRequest | None = None
    media: MediaRequest | None = None
