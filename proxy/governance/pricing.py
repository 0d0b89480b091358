"""Exact costs: money arithmetic on integer prices, and where a deployment's price comes from.

Arithmetic is integer: a cost is the exact sum of tokens times pico-dollars per token, rounded once,
half up, to **nano-dollars** (10⁻⁹ USD), the unit in which every cost is reported, stored and
summed. A provider's own billed amount (OpenRouter's ``usage.cost``) wins over the catalog and
is ``authoritative``; a cost the gateway computed is ``estimated``. A model without a price has
an unknown cost (None, never 0).

Where a price comes from, most specific first:

1. the deployment's ``prices`` (``models: {fast: [{target: up/m, prices: {...}}]}``), keyed by
   its target ``provider/model``;
2. the provider's ``prices: {model-name: {...}}``, where ``"*"`` prices every other model of
   that provider (a self-hosted server's charge-back rate);
3. the catalog (``config/prices.yaml``, or ``pricing: {catalog: path}``), by upstream model
   name: first in the provider's own family (its type, or its ``preset`` for OpenAI-compatible
   providers), then in every other family, so that ``up/gpt-4o-mini`` on any OpenAI-compatible
   server is priced as ``gpt-4o-mini``; ``mock`` providers look only at the ``mock`` family.
   Names match case-insensitively; a name that is not in the catalog is tried again without a
   dated or versioned suffix (``-2024-07-18``, ``-20241022``, ``-0613``, ``-v1:0``, ``@001``,
   ``-latest``), without a vendor prefix (``openai/gpt-4o`` → ``gpt-4o``) and, for Bedrock,
   without a cross-region prefix (``us.``, ``eu.``, ``global.`` …) and then without its vendor
   prefix (``anthropic.claude-…`` is priced as ``claude-…`` when Bedrock has no row of its
   own). Last, a family's ``"*"`` entry prices any other model of the providers priced from
   that family (the ``mock`` family has only that entry: every mock model costs the same).

Prices are parsed from YAML by :mod:`proxy.governance.price_catalog`. This module imports only the
canonical types and does no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

from proxy.core.canonical import CostSource, Deployment, MediaUnits, Usage

NANOS_PER_USD = 1_000_000_000
_MAX_MEMO = 4096
MOCK_FAMILY = "mock"


class _Unseen(enum.Enum):
    """A one-member enum, so that ``is _UNSEEN`` narrows the type of a memo lookup."""

    UNSEEN = enum.auto()


_UNSEEN: Final = _Unseen.UNSEEN  # a price not looked up yet (None: looked up, no price)

# The catalog family each provider type is priced from; OpenAI-compatible providers use their
# preset's name (a vendor), or ``openai`` without one.
_FAMILY_OF_TYPE = {
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "bedrock": "bedrock",
    "mock": MOCK_FAMILY,
}
_VERSION_SUFFIX = re.compile(
    r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{4}|-0\d\d|-v\d+(?::\d+)?|:\d+|@[\w.-]+|-latest)$"
)
_REGION_PREFIX = re.compile(r"^(?:us|eu|apac|au|jp|ca|us-gov|global)\.")
_VENDOR_PREFIX = re.compile(r"^[a-z]+\.")  # Bedrock's "anthropic." / "meta." ...


class Rates(msgspec.Struct, frozen=True, gc=False):
    """Integer prices of the five buckets, in pico-dollars per token (= µUSD per million). A
    struct, not a NamedTuple: its fields load as slots on the hot path (a NamedTuple's
    properties do not specialise)."""

    input: int
    cache_read: int
    cache_write: int
    output: int
    reasoning: int


class MediaRates(msgspec.Struct, frozen=True, gc=False):
    """Integer prices of the media units (:class:`~proxy.core.canonical.MediaUnits`), in
    pico-dollars per unit: per second of audio, per character spoken, per search unit, and per
    image by ``"<quality>/<size>"``, ``"<size>"``, ``"<quality>"`` or ``"*"`` (looked up in that
    order; an image of no listed kind, or whose size or quality is not known, is charged at the
    dearest of the kinds it may be)."""

    audio_second: int = 0
    character: int = 0
    search_unit: int = 0
    image: tuple[tuple[str, int], ...] = ()

    def image_picos(self, size: str, quality: str) -> int:
        """The price of one image of ``size`` and ``quality`` (see the class docstring); when
        one of them is not known (empty), the dearest of the kinds the image may be."""
        table = dict(self.image)
        if size and quality:
            for name in (f"{quality}/{size}", size, quality, "*"):
                found = table.get(name)
                if found is not None:
                    return found
        fitting = [price for kind, price in self.image if _may_be(kind, size, quality)]
        return max(fitting or table.values(), default=0)

    def picos(self, units: MediaUnits) -> int:
        """What ``units`` cost, in pico-dollars (audio counted to the millisecond)."""
        picos = units.characters * self.character + units.search_units * self.search_unit
        if units.audio_seconds:
            picos += round(units.audio_seconds * 1000) * self.audio_second // 1000
        if units.images:
            picos += units.images * self.image_picos(units.image_size, units.image_quality)
        return picos


def _may_be(kind: str, size: str, quality: str) -> bool:
    """Whether an image of ``size`` and ``quality`` (either empty: not known) may be of the
    price kind ``kind`` (``"<quality>/<size>"``, ``"<size>"``, ``"<quality>"`` or ``"*"``)."""
    if kind == "*":
        return True
    kind_quality, _, kind_size = kind.rpartition("/")
    if kind_quality:
        return quality in ("", kind_quality) and size in ("", kind_size)
    return kind in (size, quality) or not (size and quality)


class ModelPrice:
    """A model's prices, ready for exact arithmetic. Build it with :meth:`of`. ``media``
    prices the units of audio, image and rerank calls (None: it has none, and they cost 0)."""

    __slots__ = ("base", "batch", "dearest", "media", "tiers")

    def __init__(
        self,
        base: Rates,
        tiers: Sequence[tuple[int, Rates]] = (),
        media: MediaRates | None = None,
        *,
        batch: float = 0.5,
    ) -> None:
        self.base = base
        self.tiers = tuple(sorted(tiers, reverse=True))  # largest threshold first
        self.media = media
        self.batch = batch
        """The fraction of these prices a provider's own batch API charges (OpenAI's, Azure's
        and Anthropic's: half, the default)."""
        self.dearest = _dearest(base)
        """The base tier's dearest input and output rates (:meth:`worst_nanos`)."""

    def rates(self, prompt_tokens: int) -> Rates:
        """The rates that apply to a request whose prompt has ``prompt_tokens`` tokens."""
        for threshold, rates in self.tiers:
            if prompt_tokens > threshold:
                return rates
        return self.base

    def cost_nanos(self, usage: Usage) -> int:
        """The exact cost of ``usage`` in nano-dollars (rounded once, half up)."""
        r = (
            self.rates(usage.input + usage.cache_read + usage.cache_write)
            if self.tiers
            else self.base
        )
        picos = (
            usage.input * r.input
            + usage.cache_read * r.cache_read
            + usage.cache_write * r.cache_write
            + usage.output * r.output
            + usage.reasoning * r.reasoning
        )
        if usage.media is not None and self.media is not None:
            picos += self.media.picos(usage.media)
        return (picos + 500) // 1000

    def batch_nanos(self, usage: Usage) -> int:
        """The cost of ``usage`` run through the provider's own batch API (rounded half up)."""
        return int(self.cost_nanos(usage) * self.batch + 0.5)

    def estimate_nanos(self, input_tokens: int, output_tokens: int) -> int:
        """The cost of ``input_tokens`` uncached input and ``output_tokens`` output."""
        r = self.rates(input_tokens) if self.tiers else self.base
        return (input_tokens * r.input + output_tokens * r.output + 500) // 1000

    def worst_nanos(self, input_tokens: int, output_tokens: int) -> int:
        """The most a reply with at most ``input_tokens`` of input and ``output_tokens`` of
        output can cost, however the provider splits them into buckets: every input token at the
        dearest of the uncached, cache-read and cache-write rates, every output token at the
        dearer of the output and reasoning rates, each at the dearest tier such an input can
        fall in (:meth:`cost_nanos` of any such usage is at most this)."""
        per_input, per_output = self.dearest
        for threshold, rates in self.tiers:
            if input_tokens > threshold:
                tier_input, tier_output = _dearest(rates)
                per_input = max(per_input, tier_input)
                per_output = max(per_output, tier_output)
        return (input_tokens * per_input + output_tokens * per_output + 500) // 1000

    def worst_media_nanos(self, tokens: int, units: MediaUnits) -> int:
        """The most a media call with ``tokens`` of input text and at most ``units`` can cost
        (an image of no listed kind at the dearest image price)."""
        return self.worst_nanos(tokens, 0) + self.cost_nanos(Usage(media=units))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ModelPrice)
            and self.base == other.base
            and self.tiers == other.tiers
            and self.media == other.media
            and self.batch == other.batch
        )

    def __hash__(self) -> int:
        return hash((self.base, self.tiers, self.media, self.batch))

    def __repr__(self) -> str:
        return f"ModelPrice({self.base!r}, tiers={list(self.tiers)!r}, media={self.media!r})"


def _dearest(rates: Rates) -> tuple[int, int]:
    """The dearest rate an input token (uncached, cache read, cache write) and an output token
    (output, reasoning) can be charged at ``rates``."""
    return max(rates.input, rates.cache_read, rates.cache_write), max(rates.output, rates.reasoning)


def usd_to_nanos(usd: float) -> int | None:
    """A provider-reported amount in nano-dollars (rounded half up); None if it is not a
    finite, non-negative number."""
    try:
        exact = Decimal(repr(usd))
    except (InvalidOperation, TypeError):
        return None
    if not exact.is_finite() or exact < 0:
        return None
    return int((exact * NANOS_PER_USD).to_integral_value(ROUND_HALF_UP))


def format_usd(nanos: int) -> str:
    """``nanos`` as a plain decimal USD amount with no trailing zeros: ``"0.00042"``, ``"0"``."""
    if nanos < NANOS_PER_USD:  # the common case, without divmod() or a format
        if nanos > 0:
            return "0." + str(nanos + NANOS_PER_USD)[1:].rstrip("0")  # nine digits, padded
        if not nanos:
            return "0"
        return "-" + format_usd(-nanos)
    whole, fraction = divmod(nanos, NANOS_PER_USD)
    if not fraction:
        return str(whole)
    return f"{whole}.{str(fraction + NANOS_PER_USD)[1:].rstrip('0')}"  # nine digits, padded


def nanos_to_usd(nanos: int) -> float:
    """``nanos`` as a JSON-friendly float of USD (for display only; sums stay in nanos)."""
    return nanos / NANOS_PER_USD


class Cost(msgspec.Struct, frozen=True, gc=False):
    """What a reply costs: ``nanos`` (nano-dollars) and where the amount came from."""

    nanos: int
    source: CostSource


# ---------------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------------


class Catalog:
    """Prices by family (a vendor) and lower-cased model name; ``path`` is where it was read."""

    def __init__(
        self, families: Mapping[str, Mapping[str, ModelPrice]], path: Path | None = None
    ) -> None:
        self.families = {family: dict(models) for family, models in families.items()}
        self.path = path

    def __len__(self) -> int:
        return sum(len(models) for models in self.families.values())


# ---------------------------------------------------------------------------------------------
# Lookup with overrides
# ---------------------------------------------------------------------------------------------


def family_of(provider_type: str, preset: str | None = None) -> str:
    """The catalog family a provider is priced from (see the module docstring)."""
    if provider_type == "openai" and preset is not None:
        return preset
    return _FAMILY_OF_TYPE.get(provider_type, provider_type)


class ProviderPricing(NamedTuple):
    """How one provider is priced: its catalog ``family`` and its own ``prices`` by model name
    (``"*"`` for every model not named)."""

    family: str
    prices: Mapping[str, ModelPrice] = {}


class PriceBook:
    """Every price a config knows, looked up per deployment (see the module docstring).

    ``providers`` maps each configured provider name to its :class:`ProviderPricing`;
    ``deployments`` maps ``provider/model`` targets to their own prices. Lookups are memoised
    (bounded: a client may name ``provider/<anything>``). A provider the book does not know is
    priced from the catalog alone, in every family.
    """

    def __init__(
        self,
        catalog: Catalog,
        providers: Mapping[str, ProviderPricing] | None = None,
        deployments: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        self.catalog = catalog
        self._providers = dict(providers or {})
        self._deployments = dict(deployments or {})
        self._memo: dict[tuple[str, str], ModelPrice | None] = {}

    def price(self, provider: str, model: str) -> ModelPrice | None:
        """The price of upstream ``model`` on ``provider``; None when nothing prices it."""
        key = (provider, model)
        try:
            return self._memo[key]
        except KeyError:
            pass
        found = self._find(provider, model)
        if len(self._memo) >= _MAX_MEMO:
            self._memo.clear()
        self._memo[key] = found
        return found

    def cost(self, provider: str, model: str, usage: Usage) -> Cost | None:
        """What ``usage`` on ``provider``/``model`` costs: the provider's own amount when it
        reported one (authoritative), else the price of the usage (estimated); None when the
        model has no price."""
        if usage.cost_usd is not None:
            billed = usd_to_nanos(usage.cost_usd)
            if billed is not None:
                return Cost(billed, "authoritative")
        price = self._memo.get((provider, model), _UNSEEN)
        if price is _UNSEEN:
            price = self.price(provider, model)
        if price is None:
            return None
        return Cost(price.cost_nanos(usage), "estimated")

    def _find(self, provider: str, model: str) -> ModelPrice | None:
        own = self._deployments.get(f"{provider}/{model}")
        if own is not None:
            return own
        pricing = self._providers.get(provider)
        if pricing is not None:
            given = pricing.prices.get(model)
            if given is None:
                given = pricing.prices.get("*")
            if given is not None:
                return given
        families = self.catalog.families
        own_family = pricing.family if pricing is not None else None
        order = self._families(own_family)
        for name in _candidate_names(model):
            for family in order:
                found = families.get(family, {}).get(name)
                if found is not None:
                    return found
        return None if own_family is None else families.get(own_family, {}).get("*")

    def _families(self, own: str | None) -> list[str]:
        if own == MOCK_FAMILY:
            return [MOCK_FAMILY]
        others = [f for f in self.catalog.families if f not in (own, MOCK_FAMILY)]
        return others if own is None else [own, *others]


def _candidate_names(model: str) -> Iterator[str]:
    """The names ``model`` is looked up under, most exact first (lower-cased, no repeats)."""
    seen: set[str] = set()
    bases = [model.lower()]
    tail = bases[0].rsplit("/", 1)[-1]
    if tail != bases[0]:
        bases.append(tail)
    for base in bases:
        local = _REGION_PREFIX.sub("", base)
        for name in (base, local, _VENDOR_PREFIX.sub("", local)):
            while name and name not in seen:
                seen.add(name)
                yield name
                name = _VERSION_SUFFIX.sub("", name)


def expected_nanos(prices: PriceBook, deployment: Deployment, mix: tuple[int, int]) -> int | None:
    """What ``deployment`` would charge for the token ``mix`` (input, output); None when it has
    no price."""
    price = prices.price(deployment.provider, deployment.model)
    return None if price is None else price.estimate_nanos(*mix)
