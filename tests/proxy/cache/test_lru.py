"""The byte-bounded LRU: eviction order, the bound, expiry on an injected clock."""

from __future__ import annotations

import pytest

from proxy.cache.lru import ByteLRU
from tests.faults import FakeClock


def test_values_are_read_back_and_counted_in_bytes() -> None:
    lru = ByteLRU(100, FakeClock())
    assert lru.set("k1", b"abc", 10)
    assert lru.get("k1") == b"abc"
    assert lru.bytes == 5
    assert len(lru) == 1
    lru.set("k1", b"abcdef", 10)
    assert lru.bytes == 8
    assert len(lru) == 1


def test_the_least_recently_used_goes_first_and_the_bound_holds() -> None:
    lru = ByteLRU(30, FakeClock())
    for name in ("a", "b", "c"):
        lru.set(name, b"x" * 9, 60)  # 10 bytes each: full
    assert lru.get("a") == b"x" * 9  # a is now the most recent
    lru.set("d", b"x" * 9, 60)
    assert "b" not in lru
    assert "a" in lru
    assert "c" in lru
    assert "d" in lru
    assert lru.bytes == 30
    assert lru.evictions == 1
    lru.set("e", b"x" * 19, 60)  # needs two slots: c and a go
    assert "c" not in lru
    assert "a" not in lru
    assert "d" in lru
    assert "e" in lru
    assert lru.bytes <= 30


def test_a_value_larger_than_the_bound_is_not_stored_and_evicts_nothing() -> None:
    lru = ByteLRU(20, FakeClock())
    lru.set("a", b"1234", 60)
    assert not lru.set("big", b"x" * 30, 60)
    assert "a" in lru
    assert "big" not in lru
    assert lru.evictions == 0


def test_values_expire_on_the_clock() -> None:
    clock = FakeClock()
    lru = ByteLRU(100, clock)
    lru.set("a", b"1", 10)
    clock.advance(9.9)
    assert lru.get("a") == b"1"
    clock.advance(0.1)
    assert lru.get("a") is None
    assert lru.bytes == 0
    assert len(lru) == 0


def test_delete_and_bad_bounds() -> None:
    lru = ByteLRU(100, FakeClock())
    lru.set("a", b"1", 10)
    lru.delete("a")
    lru.delete("missing")
    assert lru.bytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        ByteLRU(0, FakeClock())


def test_resizing_evicts_the_least_recently_used_until_it_fits() -> None:
    lru = ByteLRU(30, FakeClock())
    for name in ("a", "b", "c"):
        lru.set(name, b"x" * 9, 60)
    lru.get("a")
    lru.resize(20)
    assert ("a" in lru, "b" in lru, "c" in lru) == (True, False, True)
    assert (lru.bytes, lru.evictions) == (20, 1)
    assert not lru.set("big", b"x" * 25, 60)
    lru.resize(100)
    assert lru.set("big", b"x" * 25, 60)
    with pytest.raises(ValueError, match="max_bytes"):
        lru.resize(0)


def test_a_value_is_decoded_on_its_first_decoded_read_only_and_until_it_is_replaced() -> None:
    clock = FakeClock()
    lru = ByteLRU(100, clock)
    decoded: list[bytes] = []

    def decode(value: bytes) -> list[bytes]:
        decoded.append(value)
        return [value]

    assert lru.get_decoded("a", decode) is None
    lru.set("a", b"1", 10)
    first = lru.get_decoded("a", decode)
    assert first == [b"1"]
    assert lru.get_decoded("a", decode) is first  # kept: one decoding, one shared object
    assert lru.get("a") == b"1"
    assert lru.bytes == 3  # the decoded form is charged the value's length again
    lru.set("a", b"2", 10)
    assert lru.get_decoded("a", decode) == [b"2"]
    assert decoded == [b"1", b"2"]
    clock.advance(10)
    assert lru.get_decoded("a", decode) is None
    assert len(lru) == 0


def test_a_decoded_form_evicts_the_least_recently_used_others_but_never_its_own_value() -> None:
    lru = ByteLRU(11, FakeClock())
    lru.set("a", b"123", 10)  # 4 bytes each
    lru.set("b", b"123", 10)
    lru.get_decoded("b", list)
    assert (lru.bytes, "a" in lru) == (11, True)
    lru.get_decoded("a", list)  # 14 bytes: b, the least recently used, goes
    assert (lru.bytes, "a" in lru, "b" in lru, lru.evictions) == (7, True, False, 1)
    alone = ByteLRU(6, FakeClock())
    alone.set("a", b"12345", 10)
    alone.get_decoded("a", list)  # past the bound, but nothing else to evict
    assert (alone.bytes, "a" in alone) == (11, True)
    alone.delete("a")
    assert alone.bytes == 0


def test_what_a_decoder_raises_propagates_and_leaves_the_value() -> None:
    lru = ByteLRU(100, FakeClock())
    lru.set("a", b"bad", 10)

    def decode(value: bytes) -> bytes:
        raise ValueError(value)

    with pytest.raises(ValueError, match="bad"):
        lru.get_decoded("a", decode)
    assert lru.get("a") == b"bad"
    assert lru.get_decoded("a", bytes.upper) == b"BAD"
