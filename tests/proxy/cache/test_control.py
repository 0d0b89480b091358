"""Request directives: Cache-Control, TTL header, orq's cache control, opt-in mode."""

from __future__ import annotations

import pytest

from proxy.cache.control import Directives, directives, plain_directives
from proxy.core.canonical import CacheOptions, GatewayOptions
from proxy.core.errors import BadRequest

PLAIN = GatewayOptions()


def rules(headers: dict[str, str], options: GatewayOptions = PLAIN, mode: str = "always"):
    return directives(headers, options, mode=mode, ttl=1800, max_ttl=3600)  # type: ignore[arg-type]


def test_by_default_read_and_write_with_the_configured_ttl() -> None:
    assert rules({}) == Directives(read=True, write=True, max_age=None, ttl=1800)


def test_a_plain_request_gets_the_callers_plain_directives_and_no_other_does() -> None:
    made = plain_directives(1800, 3600)
    assert made == rules({})
    assert directives({}, PLAIN, mode="always", ttl=1800, max_ttl=3600, plain=made) is made
    asked = directives(
        {"cache-control": "max-age=5"}, PLAIN, mode="always", ttl=1800, max_ttl=3600, plain=made
    )
    assert asked == Directives(read=True, write=True, max_age=5, ttl=1800)
    assert plain_directives(7200, 3600).ttl == 3600


def test_no_cache_skips_the_lookup_but_stores() -> None:
    got = rules({"cache-control": "no-cache"})
    assert (got.read, got.write, got.bypass) == (False, True, False)


@pytest.mark.parametrize("value", ["no-store", "No-Store", "max-age=10, no-store"])
def test_no_store_neither_reads_nor_writes(value: str) -> None:
    assert rules({"cache-control": value}).bypass


def test_the_no_cache_option_bypasses() -> None:
    assert rules({}, GatewayOptions(no_cache=True)).bypass


@pytest.mark.parametrize(
    ("value", "expected"),
    [("max-age=60", 60), ("max-age=0", 0), ('max-age="30"', 30), ("max-age=60, max-age=5", 5)],
)
def test_max_age_bounds_the_accepted_age(value: str, expected: int) -> None:
    assert rules({"cache-control": value}).max_age == expected


@pytest.mark.parametrize("value", ["max-age=soon", "max-age=", "max-age=-1", "bogus", ""])
def test_unparseable_directives_are_ignored(value: str) -> None:
    assert rules({"cache-control": value}) == rules({})


def test_the_ttl_header_sets_the_lifetime_up_to_max_ttl() -> None:
    assert rules({"x-crossway-cache-ttl": "60"}).ttl == 60
    assert rules({"x-crossway-cache-ttl": "999999"}).ttl == 3600


def test_orq_cache_ttl_sets_the_lifetime_and_the_header_wins() -> None:
    orq = GatewayOptions(cache=CacheOptions(ttl=120))
    assert rules({}, orq).ttl == 120
    assert rules({"x-crossway-cache-ttl": "30"}, orq).ttl == 30
    assert rules({}, GatewayOptions(cache=CacheOptions(ttl=100_000))).ttl == 3600


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "1" * 11, "٣"])
def test_a_bad_ttl_header_is_a_400_naming_it(value: str) -> None:
    with pytest.raises(BadRequest) as caught:
        rules({"x-crossway-cache-ttl": value})
    assert caught.value.param == "x-crossway-cache-ttl"
    assert caught.value.status == 400


def test_opt_in_mode_caches_only_requests_that_ask() -> None:
    assert rules({}, mode="opt_in").bypass
    assert not rules({"x-crossway-cache-ttl": "60"}, mode="opt_in").bypass
    assert not rules({}, GatewayOptions(cache=CacheOptions(ttl=60)), mode="opt_in").bypass
    assert rules(
        {"cache-control": "no-store"}, GatewayOptions(cache=CacheOptions()), "opt_in"
    ).bypass
