"""The chains ``bench.micro plugins`` compares: the same canned call through the empty chain and
through the plugins measured, over an in-process upstream.

The plugin sets (``--plugins``):

- ``cost`` (the default): pricing alone, an anonymous call;
- ``cost-budget``: the whole hot path of the ``cost`` plugin: a call whose key and team both
  have budgets, so every request reserves and settles both scopes' counters in the state store,
  and whose finished request is queued for the ledger, the writer batching it into a sink that
  discards it (the database's own work is ``bench.micro ledger``'s);
- ``auth``: ``auth`` then ``limits``, the call carrying a declared key whose key and team both
  have rpm, tpm and max_parallel limits: the cache-hit path, every limit counted;
- ``masking``: the ``masking`` plugin on every built-in entity, in front of an upstream that
  echoes the prompt, for each of two prompts: the HTTP benchmark's (no PII) and one with an
  e-mail address and a phone number (masked, and restored in the echoed reply).

A whole request is a call and its whole reply; a stream request is a call and a stream of
``--chunks`` chunks (20 by default; for ``masking``, the prompt's text in up to that many
pieces) read to its end, as the app reads it, plus the per-request finalisation the app runs.
The upstream of ``cost``, ``cost-budget`` and ``auth`` streams through the upstream layer's own
stream (clocks, batches, end hooks), as a real provider's does.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bench.micro.harness import MODES, USAGE, Chain
from plugins.auth import AuthPlugin
from plugins.cost import CostConfig, CostPlugin
from plugins.limits import LimitsOptions, LimitsPlugin
from plugins.masking import MaskingConfig, MaskingPlugin
from proxy.core.canonical import Budget, Call, Deployment, Message, Principal, Timings
from proxy.core.errors import GatewayError
from proxy.core.logs import make_logger
from proxy.core.metrics import Metrics
from proxy.core.plugin import Next, Plugin, compose
from proxy.core.redact import Redactor
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, RawFrames, Reply, Response
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.config import AuthConfig, DeclaredKey, TeamConfig
from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.writer import LedgerWriter
from proxy.governance.price_catalog import SHIPPED_CATALOG, load_catalog
from proxy.governance.pricing import PriceBook, ProviderPricing
from proxy.providers.base import Timeouts
from proxy.runtime.plugins import PluginContext
from proxy.upstream.router import Router
from proxy.upstream.stream import UpstreamClocks, UpstreamStream

CHUNKS = 20
"""The chunks of a stream request, unless told otherwise (``--chunks``)."""
PLUGINS = ("cost", "cost-budget", "auth", "masking")
PROMPTS = {
    "no PII": (
        "Summarise in one sentence what an LLM gateway does, for a reader who has never "
        "heard the term. Keep it short and avoid jargon."
    ),
    "2 values": (
        "Summarise in one sentence what an LLM gateway does, then mail it to "
        "jane.doe@example.com or text +44 20 7946 0958. Keep it short and avoid jargon."
    ),
}
"""The ``masking`` set's prompts (the other sets send one call)."""
_FRAMES_PER_READ = 5


def label(plugins: str) -> str:
    """How a report names the plugins of ``plugins``."""
    return "auth+limits" if plugins == "auth" else plugins


@dataclass(frozen=True)
class Case:
    """One line of a report: a mode, and for ``masking`` a prompt (a key of :data:`PROMPTS`)."""

    mode: str
    prompt: str | None = None

    @property
    def name(self) -> str:
        return self.mode if self.prompt is None else f"{self.prompt:<8} {self.mode}"


def cases(plugins: str, modes: Sequence[str] = tuple(MODES)) -> list[Case]:
    """The cases measured for ``plugins`` in ``modes``, prompt by prompt."""
    prompts: Sequence[str | None] = tuple(PROMPTS) if plugins == "masking" else (None,)
    return [Case(mode, prompt) for prompt in prompts for mode in modes]


async def _wire(reads: list[list[Chunk | RawFrames | None]]) -> AsyncIterator[list[Any]]:
    """A provider's reads, as the HTTP transport yields them (the last ends with None)."""
    for read in reads:
        yield read


def _stream(reads: list[list[Chunk | RawFrames]]) -> UpstreamStream:
    """The upstream layer's own stream over ``reads`` (clocks, batches, end hooks): what the
    chain gets from a real provider."""
    wire: list[list[Chunk | RawFrames | None]] = [*reads[:-1], [*reads[-1], None]]
    return UpstreamStream(
        _wire(wire), UpstreamClocks(Timeouts()), Timings(start=0.0), "upstream", _ignore_error
    )


def _ignore_error(provider: str, error: GatewayError) -> None:
    return None


_FRAMES = RawFrames(
    b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}\n\n' * 5,
    lambda _: None,
    5,  # as the OpenAI-compatible provider makes them: it knows the count
)


_WORD = Chunk(
    id="x", model="gpt-4o-mini", choices=[ChunkChoice(index=0, delta=Delta(content=" word"))]
)
_USAGE_CHUNK = Chunk(id="x", model="gpt-4o-mini", choices=[], usage=USAGE)


class _Upstream:
    """An in-process upstream: a canned whole response, or a canned stream of ``chunks``
    chunks: decoded, one chunk per read (``relay`` False), or verbatim frames, five per read
    (``relay``)."""

    def __init__(self, relay: bool = False, chunks: int = CHUNKS) -> None:
        self._relay = relay
        self._chunks = chunks

    async def __call__(self, call: Call) -> Reply:
        if call.stream:
            if self._relay:
                reads: list[list[Chunk | RawFrames]] = [[_FRAMES] for _ in range(self._chunks // 5)]
            else:
                reads = [[_WORD] for _ in range(self._chunks)]
            stream = _stream([*reads, [_USAGE_CHUNK]])
            return Reply(provider="upstream", model="gpt-4o-mini", stream=stream)  # type: ignore[arg-type]
        message = Message(role="assistant", content="a canned answer of a few words")
        response = Response(
            id="x", model="gpt-4o-mini", choices=[Choice(index=0, message=message)], usage=USAGE
        )
        return Reply(provider="upstream", model="gpt-4o-mini", response=response)


_KEY = "sk-cw-bench-" + "0123456789abcdef" * 3
_HEADERS = {"content-type": "application/json", "authorization": f"Bearer {_KEY}"}
_LIMITS = {"rpm": 10**9, "tpm": 10**12, "max_parallel": 10**6}


_DEPLOYMENT = Deployment(provider="upstream", model="gpt-4o-mini")


def _call(stream: bool) -> Call:
    return Call(
        request_id="bench",
        dialect="openai",
        model="fast",
        messages=[Message(role="user", content="How much does this cost? " * 4)],
        stream=stream,
        client_headers=_HEADERS,
        deployments=[_DEPLOYMENT],  # as the router resolves it: the worst case is priced
    )


_BUDGET = Budget(max_usd=1_000_000.0, period="1mo")
_BUDGETED = Principal(
    key_id="key_bench", key_alias="bench", team="bench", budget=_BUDGET, team_budget=_BUDGET
)


class _Discard:
    """A ledger sink that keeps nothing."""

    async def write(self, records: Sequence[Any]) -> None:
        return None


def _context() -> PluginContext:
    prices = PriceBook(load_catalog(SHIPPED_CATALOG), {"upstream": ProviderPricing("openai")})
    router = Router({}, {"upstream": True})
    metrics = Metrics()
    auth = AuthConfig(
        teams={"bench": TeamConfig(**_LIMITS)},
        keys=(DeclaredKey(key=_KEY, alias="bench", team="bench", models=("fast",), **_LIMITS),),
    )
    logger = structlog.get_logger()
    authenticator = Authenticator(auth, None, metrics, logger)
    return PluginContext(
        router.resolve, metrics, logger, prices=prices, authenticator=authenticator
    )


def _plugins(name: str, upstream: Next) -> Chain:
    context = _context()
    if name == "auth":
        plugins: Sequence[Plugin] = [
            AuthPlugin(context=context),
            LimitsPlugin(LimitsOptions(), context),
        ]
        return Chain(compose(plugins, upstream), _call)
    if name == "cost-budget":
        journal = Journal(Path(tempfile.gettempdir()) / "crossway-bench-journal")
        context.ledger = LedgerWriter(_Discard(), journal, context.metrics, context.logger)
        cost = CostPlugin(CostConfig(), context)
        chain = Chain(compose([cost], upstream), _call, _BUDGETED, [cost.finished])
        chain.ledger = context.ledger
        return chain
    return Chain(compose([CostPlugin(CostConfig(), context)], upstream), _call)


class _Reads:
    """A stream read by batches, one batch per (simulated) network read."""

    def __init__(self, batches: list[list[Chunk | RawFrames]]) -> None:
        self._batches = batches
        self.ended = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        if not self._batches:
            self.ended = True
            return []
        batch = self._batches.pop(0)
        self.ended = not self._batches
        return batch

    def __aiter__(self) -> AsyncIterator[Chunk]:
        raise NotImplementedError("read by batches")

    async def aclose(self) -> None:
        self.ended = True


_CHUNK_DECODER = msgspec.json.Decoder(Chunk)
_ENCODER = msgspec.json.Encoder()


class _Echo:
    """An in-process upstream answering with the last user text, whole or streamed in up to
    ``chunks`` pieces: decoded, one per read, or (``relay``) verbatim frames, five per read."""

    def __init__(self, relay: bool, chunks: int = CHUNKS) -> None:
        self._relay = relay
        self._chunks = chunks

    async def __call__(self, call: Call) -> Reply:
        text = call.messages[-1].text()
        if not call.stream:
            message = Message(role="assistant", content=text)
            response = Response(id="x", model="m", choices=[Choice(index=0, message=message)])
            return Reply(provider="upstream", model="m", response=response)
        size = -(-len(text) // self._chunks)
        chunks = [
            Chunk(id="x", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=piece))])
            for piece in (text[i : i + size] for i in range(0, len(text), size))
        ]
        if not self._relay:
            reads: list[list[Chunk | RawFrames]] = [[chunk] for chunk in chunks]
        else:
            reads = []
            for i in range(0, len(chunks), _FRAMES_PER_READ):
                group = chunks[i : i + _FRAMES_PER_READ]
                data = b"".join(b"data: " + _ENCODER.encode(c) + b"\n\n" for c in group)
                reads.append([RawFrames(data, _CHUNK_DECODER.decode, len(group))])
        return Reply(provider="upstream", model="m", stream=_Reads(reads))  # type: ignore[arg-type]


def _masking_call(prompt: str) -> Callable[[bool], Call]:
    def call(stream: bool) -> Call:
        return Call(
            request_id="bench",
            dialect="openai",
            model="m",
            messages=[
                Message(role="system", content="You are a concise technical assistant."),
                Message(role="user", content=prompt),
            ],
            stream=stream,
        )

    return call


def _masking(relay: bool, chunks: int, prompt: str) -> dict[str, Chain]:
    upstream = _Echo(relay, chunks)
    entities = {e: "mask" for e in ("email", "phone", "iban", "credit_card", "us_ssn")}
    options = msgspec.convert(
        {"entities": {**entities, "ip_address": "redact", "secret": "block"}}, MaskingConfig
    )
    # The gateway's own JSON logger (its pii_detected line is part of the cost), into memory.
    logger = make_logger(Redactor(), stream=io.StringIO())
    context = PluginContext(lambda *a, **k: [], Metrics(), logger)
    masking = MaskingPlugin(options, context)
    call = _masking_call(PROMPTS[prompt])
    return {
        "empty": Chain(compose([], upstream), call),
        "plugins": Chain(compose([masking], upstream), call),
    }


def chains(
    plugins: str = "cost", relay: bool = False, chunks: int = CHUNKS, prompt: str | None = None
) -> dict[str, Chain]:
    """The chains compared: ``empty`` and ``plugins`` (``plugins``: one of :data:`PLUGINS`),
    over an upstream whose streams have ``chunks`` chunks and, with ``relay``, come as verbatim
    frames; ``prompt``: for ``masking``, the key of :data:`PROMPTS` sent (the first if None)."""
    if plugins == "masking":
        return _masking(relay, chunks, prompt if prompt is not None else next(iter(PROMPTS)))
    upstream = _Upstream(relay, chunks)
    return {"empty": Chain(compose([], upstream), _call), "plugins": _plugins(plugins, upstream)}
