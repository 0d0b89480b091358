"""Prices and exact costs: the price catalog, the config's overrides, and money arithmetic.

Prices are written in USD **per million tokens** for each disjoint usage bucket of
:class:`~proxy.canonical.Usage`: ``input`` (uncached), ``cache_read``, ``cache_write``,
``output`` and ``reasoning``. ``input`` and ``output`` are required; ``cache_read`` and
``cache_write`` default to ``input``, ``reasoning`` to ``output``. ``tiers`` price long prompts
apart: ``{above_tokens: 200000, input: 6, ...}`` applies to the *whole* request once its prompt
(input + cache reads + cache writes) exceeds ``above_tokens`` tokens (the vendors' rule); a
field a tier leaves out keeps the base's price when the base gives one, else follows the tier's
own ``input`` (cache buckets) or ``output`` (reasoning). A price may have at most six decimals
(it is held as an integer number of micro-dollars per million tokens: pico-dollars per token).

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

This module imports only the canonical types; :func:`load_catalog` is its only I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import msgspec
import yaml
from msgspec import Meta, Struct

from proxy.canonical import Call, CostSource, Deployment, Usage

SHIPPED_CATALOG = Path(__file__).resolve().parent.parent / "config" / "prices.yaml"
CATALOG_FILE = "prices.yaml"
NANOS_PER_USD = 1_000_000_000
_MICROS = Decimal(1_000_000)
_MAX_MEMO = 4096
MOCK_FAMILY = "mock"

Price = Annotated[float, Meta(ge=0)]

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


class PricingError(ValueError):
    """A price or catalog is invalid; the message starts with the YAML path of the problem."""


class TierSpec(Struct, frozen=True, forbid_unknown_fields=True):
    """Prices that replace the base ones once a request's prompt exceeds ``above_tokens``."""

    above_tokens: Annotated[int, Meta(ge=1)]
    input: Price | None = None
    cache_read: Price | None = None
    cache_write: Price | None = None
    output: Price | None = None
    reasoning: Price | None = None


class PriceSpec(Struct, frozen=True, forbid_unknown_fields=True):
    """One model's prices as written: USD per million tokens per usage bucket (see above)."""

    input: Price
    output: Price
    cache_read: Price | None = None
    cache_write: Price | None = None
    reasoning: Price | None = None
    tiers: tuple[TierSpec, ...] = ()


class PricingConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The ``pricing`` section: ``catalog`` replaces the shipped catalog (a path, relative to
    the config file's directory)."""

    catalog: str | None = None


class Rates(NamedTuple):
    """Integer prices of the five buckets, in pico-dollars per token (= µUSD per million)."""

    input: int
    cache_read: int
    cache_write: int
    output: int
    reasoning: int


class ModelPrice:
    """A model's prices, ready for exact arithmetic. Build it with :meth:`of`."""

    __slots__ = ("base", "tiers")

    def __init__(self, base: Rates, tiers: Sequence[tuple[int, Rates]] = ()) -> None:
        self.base = base
        self.tiers = tuple(sorted(tiers, reverse=True))  # largest threshold first

    @classmethod
    def of(cls, spec: PriceSpec, path: str = "$") -> ModelPrice:
        """The price ``spec`` describes. Raises :class:`PricingError` (naming ``path``) for a
        price with more than six decimals, or two tiers with the same threshold."""
        base = _rates(spec, spec, path)
        tiers: list[tuple[int, Rates]] = []
        for i, tier in enumerate(spec.tiers):
            where = f"{path}.tiers[{i}]"
            if any(threshold == tier.above_tokens for threshold, _ in tiers):
                raise PricingError(f"{where}.above_tokens: {tier.above_tokens} appears twice")
            tiers.append((tier.above_tokens, _rates(tier, spec, where)))
        return cls(base, tiers)

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
        return (picos + 500) // 1000

    def estimate_nanos(self, input_tokens: int, output_tokens: int) -> int:
        """The cost of ``input_tokens`` uncached input and ``output_tokens`` output."""
        r = self.rates(input_tokens) if self.tiers else self.base
        return (input_tokens * r.input + output_tokens * r.output + 500) // 1000

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ModelPrice) and self.base == other.base and self.tiers == other.tiers
        )

    def __hash__(self) -> int:
        return hash((self.base, self.tiers))

    def __repr__(self) -> str:
        return f"ModelPrice({self.base!r}, tiers={list(self.tiers)!r})"


def _rates(prices: PriceSpec | TierSpec, base: PriceSpec, path: str) -> Rates:
    """The rates of ``prices`` (the base spec itself or one of its tiers). A field a tier
    leaves out takes the base's value if the base gives one, else its default, which follows
    the tier's own input (cache buckets) or output (reasoning)."""

    def pick(field: str) -> float | None:
        given = getattr(prices, field)
        return getattr(base, field) if given is None else given

    input_price = pick("input")
    output_price = pick("output")
    assert input_price is not None  # required in the base
    assert output_price is not None
    values = {
        "input": input_price,
        "cache_read": _or(pick("cache_read"), input_price),
        "cache_write": _or(pick("cache_write"), input_price),
        "output": output_price,
        "reasoning": _or(pick("reasoning"), output_price),
    }
    return Rates(**{field: _micros(value, f"{path}.{field}") for field, value in values.items()})


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _micros(usd_per_million: float, path: str) -> int:
    """``usd_per_million`` as an exact integer of micro-dollars (its shortest decimal form)."""
    try:
        exact = Decimal(repr(usd_per_million)) * _MICROS
    except InvalidOperation:
        raise PricingError(f"{path}: not a price") from None
    if exact != exact.to_integral_value() or exact < 0:
        raise PricingError(f"{path}: a price has at most six decimals (USD per million tokens)")
    return int(exact)


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
    sign = "-" if nanos < 0 else ""
    whole, fraction = divmod(abs(nanos), NANOS_PER_USD)
    digits = f"{fraction:09d}".rstrip("0")
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"


def nanos_to_usd(nanos: int) -> float:
    """``nanos`` as a JSON-friendly float of USD (for display only; sums stay in nanos)."""
    return nanos / NANOS_PER_USD


class Cost(NamedTuple):
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


def parse_catalog(tree: Any, source: str = "catalog") -> Catalog:
    """The catalog in a decoded YAML ``tree``: ``{family: {model: price spec}}``.

    Raises :class:`PricingError` listing every bad entry (``source: $.family.model.field``).
    """
    errors: list[str] = []
    families: dict[str, dict[str, ModelPrice]] = {}
    if not isinstance(tree, dict):
        raise PricingError(f"{source}: $: expected a mapping of families to models")
    for family, models in tree.items():
        if not isinstance(models, dict):
            errors.append(f"{source}: $.{family}: expected a mapping of models to prices")
            continue
        table = families.setdefault(str(family), {})
        for model, spec in models.items():
            path = f"$.{family}.{model}"
            try:
                price = parse_price(spec, path)
            except PricingError as exc:
                errors.append(f"{source}: {exc}")
                continue
            name = str(model).lower()
            if name in table:
                errors.append(f"{source}: {path}: listed twice (names are case-insensitive)")
            table[name] = price
    if errors:
        raise PricingError("\n".join(errors))
    return Catalog(families)


def parse_price(spec: Any, path: str) -> ModelPrice:
    """One model's price from its YAML mapping. Raises :class:`PricingError` naming ``path``."""
    try:
        decoded = msgspec.convert(spec, PriceSpec, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        at = message.rfind(" - at `$")
        if at != -1:
            inner = message[at + len(" - at `$") : -1]
            raise PricingError(f"{path}{inner}: {message[:at]}") from None
        raise PricingError(f"{path}: {message}") from None
    return ModelPrice.of(decoded, path)


def load_catalog(path: Path) -> Catalog:
    """Read the catalog file at ``path``. Raises :class:`PricingError` if it cannot be read or
    holds a bad entry."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PricingError(f"cannot read the price catalog {path}: {exc.strerror}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        tree = yaml.load(text, Loader=loader)  # a safe loader (C if available)
    except yaml.YAMLError as exc:
        raise PricingError(f"{path}: not valid YAML: {exc}") from None
    catalog = parse_catalog(tree or {}, str(path))
    catalog.path = path
    return catalog


# ---------------------------------------------------------------------------------------------
# Lookup with overrides
# ---------------------------------------------------------------------------------------------


def catalog_path(config: PricingConfig, config_dir: Path) -> Path | None:
    """Where the catalog is read from: ``pricing.catalog`` (relative to ``config_dir``), else
    ``prices.yaml`` beside the config file, else the catalog shipped in ``config/`` of the
    source tree; None when there is none (every model's cost is then unknown)."""
    if config.catalog is not None:
        return config_dir / config.catalog
    for candidate in (config_dir / CATALOG_FILE, SHIPPED_CATALOG):
        if candidate.is_file():
            return candidate
    return None


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
        own = pricing.family if pricing is not None else None
        order = self._families(own)
        for name in _candidate_names(model):
            for family in order:
                found = families.get(family, {}).get(name)
                if found is not None:
                    return found
        return None if own is None else families.get(own, {}).get("*")

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


# ---------------------------------------------------------------------------------------------
# Token estimates (for streams that end without usage, budgets and routing)
# ---------------------------------------------------------------------------------------------

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(characters: int) -> int:
    """Tokens in ``characters`` characters of text: one per four, rounded up."""
    return -(-characters // CHARS_PER_TOKEN)


def estimate_prompt_tokens(call: Call) -> int:
    """The prompt tokens of ``call``: its messages' text (one token per four characters) plus
    four per message. Images, audio and tool definitions are not counted."""
    characters = 0
    for message in call.messages:
        characters += len(message.text())
        for tool_call in message.tool_calls or ():
            characters += len(tool_call.function.arguments) + len(tool_call.function.name)
    return estimate_tokens(characters) + MESSAGE_OVERHEAD_TOKENS * len(call.messages)


def requested_output_tokens(call: Call) -> int | None:
    """The output limit the client set (``max_completion_tokens``, else ``max_tokens``)."""
    params = call.params
    for limit in (params.max_completion_tokens, params.max_tokens):
        if isinstance(limit, int):
            return limit
    return None


def expected_tokens(call: Call, default_output: int) -> tuple[int, int]:
    """The token mix ``call`` is expected to have: its estimated prompt, and the output limit
    it set (``default_output`` when it set none)."""
    output = requested_output_tokens(call)
    return estimate_prompt_tokens(call), default_output if output is None else output


def expected_nanos(prices: PriceBook, deployment: Deployment, mix: tuple[int, int]) -> int | None:
    """What ``deployment`` would charge for the token ``mix`` (input, output); None when it has
    no price."""
    price = prices.price(deployment.provider, deployment.model)
    return None if price is None else price.estimate_nanos(*mix)
