"""Prices as they are written — in the shipped catalog, a replacement catalog or the config —
parsed into :class:`~proxy.governance.pricing.ModelPrice` values, and the catalog file's location.

Prices are written in USD **per million tokens** for each disjoint usage bucket of
:class:`~proxy.core.canonical.Usage`: ``input`` (uncached), ``cache_read``, ``cache_write``,
``output`` and ``reasoning``. ``input`` and ``output`` are required; ``cache_read`` and
``cache_write`` default to ``input``, ``reasoning`` to ``output``. ``tiers`` price long prompts
apart: ``{above_tokens: 200000, input: 6, ...}`` applies to the *whole* request once its prompt
(input + cache reads + cache writes) exceeds ``above_tokens`` tokens (the vendors' rule); a
field a tier leaves out keeps the base's price when the base gives one, else follows the tier's
own ``input`` (cache buckets) or ``output`` (reasoning). A price may have at most six decimals
(it is held as an integer number of micro-dollars per million tokens: pico-dollars per token).
``batch`` is the fraction of the prices a provider's own batch API charges (default 0.5, as
OpenAI, Azure and Anthropic discount batches; a native batch is priced so, :mod:`proxy.batches`).

Audio, image and rerank models add prices per unit, in USD **per unit** (at most twelve
decimals: pico-dollars): ``audio_second`` (audio transcribed or translated), ``character``
(text spoken), ``search_unit`` (a rerank query over up to 100 documents) and ``image``: one
price for every image, or a mapping from ``"<quality>/<size>"``, ``"<size>"``, ``"<quality>"``
or ``"*"`` to a price (see :class:`~proxy.governance.pricing.MediaRates`).

Every function raises :class:`PricingError` for a bad price, naming its YAML path;
:func:`load_catalog` is this module's only I/O.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml
from msgspec import Meta, Struct

from proxy.governance.pricing import Catalog, MediaRates, ModelPrice, Rates

SHIPPED_CATALOG = Path(__file__).resolve().parents[2] / "config" / "prices.yaml"
CATALOG_FILE = "prices.yaml"
_MICROS = Decimal(1_000_000)
_PICOS = Decimal(1_000_000_000_000)

Price = Annotated[float, Meta(ge=0)]


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
    batch: Annotated[float, Meta(gt=0, le=1)] = 0.5
    """What a provider's own batch API charges, as a fraction of these prices."""
    audio_second: Price | None = None
    character: Price | None = None
    search_unit: Price | None = None
    image: Price | dict[str, Price] | None = None


class PricingConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The ``pricing`` section: ``catalog`` replaces the shipped catalog (a path, relative to
    the config file's directory)."""

    catalog: str | None = None


def price_of(spec: PriceSpec, path: str = "$") -> ModelPrice:
    """The price ``spec`` describes. Raises :class:`PricingError` (naming ``path``) for a
    price with more than six decimals, or two tiers with the same threshold."""
    base = _rates(spec, spec, path)
    tiers: list[tuple[int, Rates]] = []
    for i, tier in enumerate(spec.tiers):
        where = f"{path}.tiers[{i}]"
        if any(threshold == tier.above_tokens for threshold, _ in tiers):
            raise PricingError(f"{where}.above_tokens: {tier.above_tokens} appears twice")
        tiers.append((tier.above_tokens, _rates(tier, spec, where)))
    return ModelPrice(base, tiers, _media_rates(spec, path), batch=spec.batch)


def _media_rates(spec: PriceSpec, path: str) -> MediaRates | None:
    """The per-unit prices of ``spec`` (USD per unit as pico-dollars); None when it has none."""
    image = spec.image
    if (
        spec.audio_second is None
        and spec.character is None
        and spec.search_unit is None
        and image is None
    ):
        return None
    images = {"*": image} if isinstance(image, float | int) else dict(image or {})
    return MediaRates(
        audio_second=_picos(spec.audio_second, f"{path}.audio_second"),
        character=_picos(spec.character, f"{path}.character"),
        search_unit=_picos(spec.search_unit, f"{path}.search_unit"),
        image=tuple(
            (str(kind).lower(), _picos(price, f"{path}.image.{kind}"))
            for kind, price in images.items()
        ),
    )


def _picos(usd: float | None, path: str) -> int:
    """``usd`` per unit as an exact integer of pico-dollars (0 when not given)."""
    if usd is None:
        return 0
    return _exact(usd, _PICOS, path, "at most twelve decimals (USD per unit)")


def _rates(prices: PriceSpec | TierSpec, base: PriceSpec, path: str) -> Rates:
    """The rates of ``prices`` (the base spec itself or one of its tiers). A field a tier
    leaves out takes the base's value if the base gives one, else its default, which follows
    the tier's own input (cache buckets) or output (reasoning)."""

    def pick(field: str) -> float | None:
        given: float | None = getattr(prices, field)
        if given is not None:
            return given
        fallback: float | None = getattr(base, field)
        return fallback

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
    return _exact(usd_per_million, _MICROS, path, "at most six decimals (USD per million tokens)")


def _exact(value: float, scale: Decimal, path: str, rule: str) -> int:
    """``value`` times ``scale`` as an exact integer (from its shortest decimal form); a
    :class:`PricingError` naming ``path`` and ``rule`` when it is not one, or negative."""
    try:
        exact = Decimal(repr(value)) * scale
    except InvalidOperation:
        raise PricingError(f"{path}: not a price") from None
    if exact != exact.to_integral_value() or exact < 0:
        raise PricingError(f"{path}: a price has {rule}")
    return int(exact)


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
    return price_of(decoded, path)


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
