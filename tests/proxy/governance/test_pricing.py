"""proxy/governance/pricing.py: the shipped catalog, lookups with overrides, and exact integer
costs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import Call, MediaUnits, Message, Params, Usage
from proxy.core.token_estimate import estimate_prompt_tokens, expected_tokens
from proxy.governance.price_catalog import (
    SHIPPED_CATALOG,
    PricingConfig,
    PricingError,
    catalog_path,
    load_catalog,
    parse_catalog,
    parse_price,
)
from proxy.governance.pricing import (
    Catalog,
    Cost,
    PriceBook,
    ProviderPricing,
    family_of,
    format_usd,
    usd_to_nanos,
)
from proxy.providers import PROVIDER_TYPES, build_provider
from proxy.runtime.config import parse_config
from proxy.runtime.snapshot import price_book

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CATALOG = load_catalog(SHIPPED_CATALOG)


def provider_for(kind: str, **fields: Any) -> Any:
    config = msgspec.convert({"type": kind, **fields}, PROVIDER_TYPES[kind].config)
    return build_provider("p", config)


def shipped_book(kind: str, preset: str | None = None) -> PriceBook:
    return PriceBook(CATALOG, {"p": ProviderPricing(family_of(kind, preset))})


def fixture(path: str) -> dict[str, Any]:
    return json.loads((FIXTURES / path).read_text(encoding="utf-8"))


def usage_of_response(kind: str, path: str, fields: dict[str, Any]) -> tuple[Usage, str]:
    case = fixture(path)
    provider = provider_for(kind, **fields)
    body = json.dumps(case["body"]).encode()
    response = provider.parse_response(body, case["requested_model"])
    assert response.usage is not None
    return response.usage, case["requested_model"]


# ---------------------------------------------------------------------------------------------
# Exact cost of each provider's usage shape, from the providers' own fixtures
# ---------------------------------------------------------------------------------------------

# (provider type, config, fixture, expected nano-dollars, source); the arithmetic in comments
# is the vendor's list price per million tokens times each disjoint bucket.
RESPONSE_CASES = [
    # OpenAI: prompt_tokens 100 include 30 cached, completion_tokens 50 include 20 reasoning.
    # gpt-4o-2024-08-06 -> gpt-4o: 70*2.50 + 30*1.25 + 30*10 + 20*10 = 712.5 micro-USD.
    ("openai", {}, "openai/response_usage_buckets.json", 712_500, "estimated"),
    # OpenRouter bills the request itself: usage.cost 0.000123 wins over any price.
    (
        "openai",
        {"preset": "openrouter"},
        "openai/response_openrouter_cost.json",
        123_000,
        "authoritative",
    ),
    # Anthropic: input excludes cache reads and writes; claude-sonnet-4-5 (dated id), prompt
    # 5,146 tokens (under the 200K tier): 2095*3 + 1000*0.30 + 2051*3.75 + 503*15.
    (
        "anthropic",
        {"api_key": "k"},
        "anthropic/response_text_cache_usage.json",
        21_821_250,
        "estimated",
    ),
    # Gemini: promptTokenCount includes the cached content; thoughts are reasoning.
    # gemini-2.5-pro: 226*1.25 + 1024*0.125 + 80*10 + 300*10 = 4210.5 micro-USD.
    (
        "gemini",
        {"api_key": "k"},
        "gemini/response_text_thoughts_usage.json",
        4_210_500,
        "estimated",
    ),
    # Bedrock: anthropic.claude-3-5-haiku-20241022-v1:0 has no Bedrock row: priced as Anthropic's
    # claude-3-5-haiku: 30*0.80 + 1200*0.08 + 300*1.00 + 12*4 = 468 micro-USD.
    ("bedrock", {"region": "us-east-1"}, "bedrock/response_text.json", 468_000, "estimated"),
]


@pytest.mark.parametrize(("kind", "fields", "path", "nanos", "source"), RESPONSE_CASES)
def test_the_exact_cost_of_each_providers_usage_shape(kind, fields, path, nanos, source) -> None:
    usage, model = usage_of_response(kind, path, fields)
    book = shipped_book(kind, fields.get("preset"))
    assert book.cost("p", model, usage) == Cost(nanos, source)


def test_a_streamed_openai_usage_chunk_costs_the_same_as_the_whole_answer() -> None:
    case = fixture("openai/event_usage.json")
    chunk = provider_for("openai").parse_event("", json.dumps(case["data"]).encode())
    assert chunk is not None
    assert chunk.usage is not None
    assert shipped_book("openai").cost("p", "gpt-4o", chunk.usage) == Cost(712_500, "estimated")


def test_a_long_prompt_prices_the_whole_request_at_the_tier() -> None:
    book = shipped_book("anthropic")
    # 150,000 + 60,000 cached = 210,000 prompt tokens > 200,000: every bucket at the tier.
    long = Usage(input=150_000, cache_read=60_000, output=1_000)
    assert book.cost("p", "claude-sonnet-4-5", long) == Cost(958_500_000, "estimated")
    # Exactly at the threshold is still the base price: 200,000*3 + 1,000*15.
    edge = Usage(input=200_000, output=1_000)
    assert book.cost("p", "claude-sonnet-4-5", edge) == Cost(615_000_000, "estimated")


def test_costs_are_integers_rounded_once_half_up() -> None:
    price = parse_price({"input": 0.0028, "output": 0.00875}, "$")
    assert price.cost_nanos(Usage(input=1)) == 3  # 2.8 nano-dollars
    assert price.cost_nanos(Usage(output=2)) == 18  # 17.5
    assert price.cost_nanos(Usage(input=1, output=2)) == 20  # 20.3: summed before rounding
    many = Usage(input=1_000_000_000, output=1_000_000_000)
    assert price.cost_nanos(many) == 11_550_000_000  # $11.55, no float drift


def test_reasoning_and_cache_buckets_follow_input_and_output_unless_priced() -> None:
    price = parse_price({"input": 1, "output": 4}, "$")
    assert price.cost_nanos(Usage(cache_read=1, cache_write=1, reasoning=1)) == 1000 + 1000 + 4000
    priced = parse_price({"input": 1, "output": 4, "cache_read": 0.1, "reasoning": 8}, "$")
    assert priced.cost_nanos(Usage(cache_read=10, reasoning=1)) == 1000 + 8000


def test_a_tier_keeps_what_it_does_not_say_and_defaults_follow_the_tiers_own_prices() -> None:
    price = parse_price(
        {"input": 1, "output": 2, "cache_write": 5, "tiers": [{"above_tokens": 10, "input": 3}]},
        "$",
    )
    low, high = price.rates(10), price.rates(11)
    assert (low.input, low.cache_read, low.cache_write, low.output) == (
        1_000_000,
        1_000_000,
        5_000_000,
        2_000_000,
    )
    assert (high.input, high.cache_read, high.cache_write, high.output) == (
        3_000_000,
        3_000_000,
        5_000_000,
        2_000_000,
    )


def test_the_worst_case_prices_every_token_at_the_dearest_rate_its_bucket_could_have() -> None:
    price = parse_price(
        {
            "input": 1,
            "cache_write": 1.25,
            "output": 4,
            "reasoning": 5,
            "tiers": [{"above_tokens": 10, "input": 3}],
        },
        "$",
    )
    assert price.worst_nanos(10, 2) == 10 * 1250 + 2 * 5000  # cache writes, reasoning
    assert price.worst_nanos(11, 2) == 11 * 3000 + 2 * 5000  # the tier this input may reach
    for usage in (
        Usage(input=10, output=2),
        Usage(cache_write=10, reasoning=2),
        Usage(input=5, cache_read=6, output=1, reasoning=1),
    ):
        assert price.cost_nanos(usage) <= price.worst_nanos(11, 2)


def test_every_mock_model_has_the_documented_fixed_price() -> None:
    book = shipped_book("mock")
    for model in ("echo", "default", "gpt-4o"):  # a mock model is never priced as a vendor's
        assert book.cost("p", model, Usage(input=10, output=5)) == Cost(20_000, "estimated")


def test_the_provider_billed_amount_is_exact_too() -> None:
    assert usd_to_nanos(0.000123) == 123_000
    assert usd_to_nanos(0.1 + 0.2) == 300_000_000  # 0.30000000000000004 rounds to the nano
    assert usd_to_nanos(-1.0) is None
    assert usd_to_nanos(float("nan")) is None
    book = shipped_book("openai")
    # A nonsensical billed amount falls back to the price of the usage.
    assert book.cost("p", "gpt-4o", Usage(input=1, cost_usd=-5.0)) == Cost(2_500, "estimated")


def test_amounts_print_as_plain_decimals() -> None:
    assert format_usd(245_000) == "0.000245"
    assert format_usd(0) == "0"
    assert format_usd(12_500_000_000) == "12.5"
    assert format_usd(1) == "0.000000001"
    assert format_usd(-1_500_000_000) == "-1.5"


# ---------------------------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "preset", "model", "priced_as"),
    [
        ("openai", None, "gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("openai", None, "gpt-4o-mini-2024-07-18", ("openai", "gpt-4o-mini")),
        ("openai", None, "GPT-4o-Mini", ("openai", "gpt-4o-mini")),
        ("openai", "openrouter", "openai/gpt-4o", ("openai", "gpt-4o")),
        ("azure", None, "gpt-4.1", ("openai", "gpt-4.1")),
        ("openai", None, "claude-haiku-4-5-20251001", ("anthropic", "claude-haiku-4-5")),
        ("anthropic", None, "claude-opus-4-5-20251101", ("anthropic", "claude-opus-4-5")),
        (
            "bedrock",
            None,
            "us.anthropic.claude-sonnet-4-6",
            ("bedrock", "us.anthropic.claude-sonnet-4-6"),
        ),
        (
            "bedrock",
            None,
            "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
            ("bedrock", "anthropic.claude-haiku-4-5-20251001-v1:0"),
        ),
        (
            "bedrock",
            None,
            "anthropic.claude-opus-4-1-20250805-v1:0",
            ("bedrock", "anthropic.claude-opus-4-1-20250805-v1:0"),
        ),
        ("gemini", None, "gemini-2.5-flash", ("gemini", "gemini-2.5-flash")),
        ("openai", "groq", "openai/gpt-oss-120b", ("groq", "openai/gpt-oss-120b")),
        ("openai", "together", "openai/gpt-oss-120b", ("together", "openai/gpt-oss-120b")),
        ("openai", "deepseek", "deepseek-v4-flash", ("deepseek", "deepseek-v4-flash")),
        ("openai", "xai", "grok-4.3", ("xai", "grok-4.3")),
        ("openai", "mistral", "mistral-large-latest", ("mistral", "mistral-large-latest")),
    ],
)
def test_a_model_is_priced_by_its_upstream_name(kind, preset, model, priced_as) -> None:
    family, name = priced_as
    assert shipped_book(kind, preset).price("p", model) == CATALOG.families[family][name]


def test_the_providers_family_wins_where_names_clash() -> None:
    catalog = parse_catalog(
        {
            "alpha": {"shared": {"input": 1, "output": 1}},
            "beta": {"shared": {"input": 2, "output": 2}, "only-beta": {"input": 3, "output": 3}},
        }
    )
    book = PriceBook(
        catalog,
        {"a": ProviderPricing("alpha"), "b": ProviderPricing("beta"), "x": ProviderPricing("x")},
    )
    assert book.price("a", "shared") == catalog.families["alpha"]["shared"]
    assert book.price("b", "shared") == catalog.families["beta"]["shared"]
    assert book.price("x", "shared") == catalog.families["alpha"]["shared"]  # catalog order
    assert book.price("a", "only-beta") == catalog.families["beta"]["only-beta"]


def test_a_model_nothing_prices_has_an_unknown_cost_never_zero() -> None:
    book = shipped_book("openai")
    assert book.price("p", "my-finetune-7b") is None
    assert book.cost("p", "my-finetune-7b", Usage(input=10)) is None
    assert PriceBook(Catalog({})).cost("p", "gpt-4o", Usage(input=1)) is None


def test_overrides_most_specific_first() -> None:
    config = parse_config(
        """
        providers:
          up:
            type: openai
            base_url: http://127.0.0.1:9/v1
            prices:
              gpt-4o-mini: {input: 0.5, output: 1}
              "*": {input: 0.01, output: 0.02}
        models:
          cheap: [{target: up/gpt-4o, prices: {input: 0.15, output: 0.6}}]
        """
    )
    book = price_book(config, SHIPPED_CATALOG.parent)
    assert book.price("up", "gpt-4o") == parse_price({"input": 0.15, "output": 0.6}, "$")
    assert book.price("up", "gpt-4o-mini") == parse_price({"input": 0.5, "output": 1}, "$")
    assert book.price("up", "gpt-5") == parse_price({"input": 0.01, "output": 0.02}, "$")


def test_a_catalog_of_ones_own_replaces_the_shipped_one(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("internal:\n  gpt-4o: {input: 9, output: 9}\n")
    config = parse_config(
        "pricing: {catalog: mine.yaml}\nproviders: {up: {type: openai, base_url: 'http://h/v1'}}"
    )
    book = price_book(config, tmp_path)
    assert book.price("up", "gpt-4o") == parse_price({"input": 9, "output": 9}, "$")
    assert book.price("up", "gpt-4o-mini") is None  # nothing of the shipped catalog is left


def test_the_default_catalog_is_the_one_beside_the_config_else_the_shipped_one(
    tmp_path: Path,
) -> None:
    assert catalog_path(PricingConfig(), tmp_path) == SHIPPED_CATALOG
    (tmp_path / "prices.yaml").write_text("{}")
    assert catalog_path(PricingConfig(), tmp_path) == tmp_path / "prices.yaml"
    assert catalog_path(PricingConfig(catalog="x/y.yaml"), tmp_path) == tmp_path / "x/y.yaml"


def test_lookups_are_memoised_within_a_bound() -> None:
    book = shipped_book("openai")
    for i in range(5000):
        assert book.price("p", f"unknown-{i}") is None
    assert len(book._memo) <= 4096
    assert book.price("p", "gpt-4o") is not None


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def test_the_shipped_catalog_prices_every_family_the_gateway_knows() -> None:
    families = set(CATALOG.families)
    expected = {
        "openai",
        "anthropic",
        "gemini",
        "mistral",
        "groq",
        "deepseek",
        "xai",
        "together",
        "bedrock",
        "mock",
    }
    assert expected <= families
    for family in expected - {"mock"}:
        assert len(CATALOG.families[family]) >= 4, family
    embeddings = [m for models in CATALOG.families.values() for m in models if "embed" in m]
    assert len(embeddings) >= 5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"input": 0.0000001, "output": 1}, "$.m.input: a price has at most six decimals"),
        ({"input": 1}, "$.m: Object missing required field `output`"),
        ({"input": -1, "output": 1}, "$.m.input: Expected `float` >= 0"),
        ({"input": 1, "output": 1, "cache": 1}, "$.m: Object contains unknown field `cache`"),
        (
            {"input": 1, "output": 1, "tiers": [{"above_tokens": 5}, {"above_tokens": 5}]},
            "$.m.tiers[1].above_tokens: 5 appears twice",
        ),
    ],
)
def test_a_bad_price_is_an_error_naming_its_path(spec, message) -> None:
    with pytest.raises(PricingError) as caught:
        parse_price(spec, "$.m")
    assert str(caught.value).startswith(message)


def test_a_bad_catalog_lists_every_bad_entry(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "a:\n  m: {input: 1}\n  M: {input: 1, output: 1}\n"
        "  m2: {input: 1, output: 1}\n  M2: {input: 2, output: 2}\nb: 3\n"
    )
    with pytest.raises(PricingError) as caught:
        load_catalog(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert "$.a.m: Object missing required field `output`" in lines[0]
    assert "$.a.M2: listed twice" in lines[1]
    assert "$.b: expected a mapping" in lines[2]


def test_config_prices_are_validated_with_their_yaml_paths() -> None:
    from proxy.runtime.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        parse_config(
            """
            providers:
              up: {type: openai, base_url: "http://h/v1", prices: {m: {input: 1}}}
            models:
              a: [{target: up/m, prices: {input: 1, output: 2}}]
              b: [{target: up/m, prices: {input: 1, output: 3}}]
            pricing: {catalogue: x}
            """
        )
    errors = caught.value.errors
    assert "$.providers.up.prices.m: Object missing required field `output`" in errors
    assert "$.models.b[0].prices: up/m is priced differently at $.models.a[0].prices" in errors
    assert any(e.startswith("$.pricing: Object contains unknown field `catalogue`") for e in errors)


# ---------------------------------------------------------------------------------------------
# Token estimates
# ---------------------------------------------------------------------------------------------


def test_prompt_estimate_counts_text_at_four_characters_a_token_plus_a_little_per_message() -> None:
    call = Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message("system", "x" * 10), Message("user", "y" * 8)],
        params=Params(max_tokens=50),
    )
    assert estimate_prompt_tokens(call) == 5 + 2 * 4  # ceil(18 / 4) + 4 per message
    assert expected_tokens(call, 99) == (13, 50)
    call.params = Params(max_completion_tokens=7, max_tokens=50)
    assert expected_tokens(call, 99) == (13, 50)  # the larger: an upstream may read either
    call.params = Params()
    assert expected_tokens(call, 99) == (13, 99)


# -- media units -----------------------------------------------------------------------------


def test_media_units_are_priced_per_unit_exactly() -> None:
    price = parse_price(
        {
            "input": 1,
            "output": 0,
            "audio_second": 0.0001,
            "character": 0.000015,
            "search_unit": 0.002,
            "image": {"hd/1024x1024": 0.08, "standard/1024x1024": 0.04, "512x512": 0.018},
        },
        "$.m",
    )
    units = MediaUnits(
        audio_seconds=12.345,
        characters=1000,
        search_units=2,
        images=2,
        image_size="1024x1024",
        image_quality="hd",
    )
    # 1,000,000 input tokens at $1/M + 12.345 s + 1000 chars + 2 units + 2 hd images
    expected = 1_000_000_000 + 1_234_500 + 15_000_000 + 4_000_000 + 160_000_000
    assert price.cost_nanos(Usage(input=1_000_000, media=units)) == expected
    assert price.cost_nanos(Usage(media=MediaUnits(images=1, image_size="512x512"))) == 18_000_000


def test_an_image_of_unknown_kind_is_priced_at_the_dearest_it_may_be() -> None:
    price = parse_price(
        {
            "input": 0,
            "output": 0,
            "image": {"standard/1024x1024": 0.04, "hd/1024x1024": 0.08, "hd/1792x1024": 0.12},
        },
        "$.m",
    )

    def one(size: str, quality: str) -> int:
        return price.cost_nanos(
            Usage(media=MediaUnits(images=1, image_size=size, image_quality=quality))
        )

    assert one("1024x1024", "standard") == 40_000_000
    assert one("1024x1024", "") == 80_000_000  # hd or standard: the dearer
    assert one("", "standard") == 40_000_000
    assert one("", "") == 120_000_000
    assert one("256x256", "low") == 120_000_000  # no such kind: the dearest
    assert price.worst_media_nanos(4, MediaUnits(images=2)) == 240_000_000


def test_a_flat_image_price_and_a_model_without_media_prices() -> None:
    flat = parse_price({"input": 0, "output": 0, "image": 0.02}, "$.m")
    assert flat.cost_nanos(Usage(media=MediaUnits(images=3, image_size="x"))) == 60_000_000
    plain = parse_price({"input": 1, "output": 1}, "$.m")
    assert plain.media is None
    assert plain.cost_nanos(Usage(input=1000, media=MediaUnits(characters=10))) == 1_000_000


def test_a_per_unit_price_has_at_most_twelve_decimals() -> None:
    with pytest.raises(PricingError, match=r"\$\.m\.character: .*twelve decimals"):
        parse_price({"input": 0, "output": 0, "character": 1e-13}, "$.m")


def test_the_shipped_catalog_prices_media_models() -> None:
    catalog = load_catalog(SHIPPED_CATALOG)
    book = PriceBook(catalog, {"up": ProviderPricing("openai")})
    whisper = book.cost("up", "whisper-1", Usage(media=MediaUnits(audio_seconds=60)))
    assert whisper is not None
    assert whisper.nanos == 6_000_000  # $0.006 a minute
    rerank = book.cost("up", "rerank-v3.5", Usage(media=MediaUnits(search_units=1000)))
    assert rerank is not None
    assert rerank.nanos == 2_000_000_000  # $2 per 1,000 searches
