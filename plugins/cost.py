"""``cost``: what each reply costs, told to the client and recorded for the spend ledger.

Place it after ``limits`` (and after ``cache``, whose hits cost nothing and never reach it),
before ``fallback`` / ``retry`` / ``balance``, so that one request is charged once for the
deployment that finally served it.

The cost of a reply is computed from its usage with the config's
:class:`~proxy.pricing.PriceBook` (exact integer nano-dollars): the provider's own billed
amount when it reports one (``authoritative``), else the price of the usage buckets
(``estimated``). It is written to the call's :class:`~proxy.canonical.Accounting`
(``cost_nanos``, ``cost_source``), counted in ``crossway_cost_usd_total{provider,model}`` (model
= the alias the client asked for, bounded) and, on whole responses, sent as
``x-crossway-cost-usd`` (a plain decimal, e.g. ``0.000245``). A model with no price has an
unknown cost (None, never 0), counted in ``crossway_cost_unknown_total{provider}``.

Streams are charged when they end, fail midway or are closed by a client that went away,
for what was generated: the usage the upstream reported if it did, else an estimate (the
prompt's text, and the streamed text at one token per four characters, each verbatim OpenAI
frame counted as one token), always ``estimated``, kept in ``accounting.usage``. A whole
response without usage is estimated the same way. A failed call (no reply) costs 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from proxy.canonical import Call, Chunk, Message, RawFrames, Reply, Usage, batched
from proxy.chain import Next, PluginContext
from proxy.pricing import (
    PriceBook,
    estimate_prompt_tokens,
    estimate_tokens,
    format_usd,
    nanos_to_usd,
)

COST_HEADER = "x-crossway-cost-usd"


class CostConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""


class CostPlugin:
    """Prices every reply; see the module docstring."""

    Options = CostConfig

    def __init__(self, options: CostConfig, context: PluginContext) -> None:
        self._prices: PriceBook = context.prices
        self._metrics = context.metrics

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Pass ``call`` on and price what comes back (a stream when it is over)."""
        try:
            reply = await next(call)
        except BaseException:
            call.accounting.cost_nanos = 0  # nothing was served
            call.accounting.cost_source = "estimated"
            raise
        response = reply.response
        if response is None:
            assert reply.stream is not None
            reply.stream = _Metered(reply.stream, self._stream_ended(call, reply))
            return reply
        usage = response.usage
        if usage is None:
            usage = Usage(
                input=estimate_prompt_tokens(call),
                output=sum(_message_tokens(choice.message) for choice in response.choices),
            )
            call.accounting.usage = usage
        nanos = self._charge(call, reply.provider, reply.model, usage)
        if nanos is not None:
            reply.headers[COST_HEADER] = format_usd(nanos)
        return reply

    def _stream_ended(self, call: Call, reply: Reply) -> Callable[[Usage | None, int], None]:
        def ended(usage: Usage | None, generated: int) -> None:
            estimated = usage is None
            if usage is None:
                usage = Usage(input=estimate_prompt_tokens(call), output=generated)
                call.accounting.usage = usage
            self._charge(call, reply.provider, reply.model, usage, estimated=estimated)

        return ended

    def _charge(
        self, call: Call, provider: str, model: str, usage: Usage, *, estimated: bool = False
    ) -> int | None:
        """Record what ``usage`` on ``provider``/``model`` cost; the nano-dollars, or None."""
        accounting = call.accounting
        cost = self._prices.cost(provider, model, usage)
        metrics = self._metrics
        if cost is None:
            accounting.cost_nanos = None
            accounting.cost_source = None
            metrics.cost_unknown(provider).inc()
            return None
        accounting.cost_nanos = cost.nanos
        accounting.cost_source = "estimated" if estimated else cost.source
        if cost.nanos:
            metrics.cost_usd(provider, metrics.model_label(call.model)).inc(
                nanos_to_usd(cost.nanos)
            )
        return cost.nanos


def _message_tokens(message: Message) -> int:
    characters = len(message.text()) + len(message.reasoning_content or "")
    for tool_call in message.tool_calls or ():
        characters += len(tool_call.function.arguments)
    return estimate_tokens(characters)


class _Metered:
    """A reply stream that reports, once, the usage it carried and what it generated.

    ``on_end(usage, generated)`` is called exactly once — at the end, on a failure, or on
    close — with the last usage the stream carried (None if none) and the output tokens it
    estimates from the text it passed: one per four characters of decoded chunks, one per
    verbatim frame. Batches and verbatim frames pass through unchanged (see
    ``BatchedStream``).
    """

    __slots__ = (
        "_batches",
        "_characters",
        "_done",
        "_frames",
        "_inner",
        "_next_batch",
        "_on_end",
        "_usage",
    )

    def __init__(
        self, inner: AsyncIterator[Chunk], on_end: Callable[[Usage | None, int], None]
    ) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._next_batch = self._batches.next_batch
        self._on_end = on_end
        self._usage: Usage | None = None
        self._characters = 0
        self._frames = 0
        self._done = False

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see ``BatchedStream``)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch, observed on the way (see ``BatchedStream``)."""
        try:
            batch = await self._next_batch(raw)
        except BaseException:
            self._end()
            raise
        if not batch:
            self._end()
            return batch
        for item in batch:
            if type(item) is Chunk:
                self._observe(item)
            else:  # verbatim frames: one chunk, about one token, per frame
                self._frames += item.count  # type: ignore[union-attr]
        return batch

    def __aiter__(self) -> _Metered:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except BaseException:
            self._end()
            raise
        self._observe(chunk)
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): charges what was generated, frees the upstream."""
        self._end()
        aclose: Any = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()

    def _observe(self, chunk: Chunk) -> None:
        if chunk.usage is not None:
            self._usage = chunk.usage
        characters = 0
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                characters += len(delta.content)  # type: ignore[arg-type]
            if delta.reasoning_content:
                characters += len(delta.reasoning_content)  # type: ignore[arg-type]
            if delta.tool_calls:
                for fragment in delta.tool_calls:
                    function = fragment.function
                    if function and function.arguments:
                        characters += len(function.arguments)
        self._characters += characters

    def _end(self) -> None:
        if not self._done:
            self._done = True
            self._on_end(self._usage, estimate_tokens(self._characters) + self._frames)
