"""The coalescer's bookkeeping: one shared flight per key, forgotten by its own leader only, and
the savings of streamed joiners set when the stream ends. (Joining itself, whole and streamed,
is exercised through the cache plugin in tests/plugins/test_cache.py.)"""

from __future__ import annotations

from proxy.cache.coalesce import Coalescer
from proxy.core.canonical import Accounting


def coalescer(saved: list[tuple[Accounting, int | None]]) -> Coalescer:
    return Coalescer(1_000, lambda accounting, nanos: saved.append((accounting, nanos)))


def test_one_shared_flight_per_key_and_only_its_leader_forgets_it() -> None:
    flights = coalescer([])
    first, shared = flights.lead("k", Accounting(), share=True)
    assert shared is not None
    assert shared.flight is first
    assert flights.joinable("k") is shared
    second, none = flights.lead("k", Accounting(), share=True)  # a flight holds the key
    assert none is None
    assert not second.joinable
    flights.forget("k", second)  # not the one held: nothing changes
    assert flights.joinable("k") is shared
    assert len(flights) == 1
    flights.forget("k", first)
    assert flights.joinable("k") is None
    assert len(flights) == 0
    assert flights.lead("other", Accounting(), share=False)[1] is None
    assert flights.joinable("other") is None


def test_a_failed_flight_takes_no_joiners() -> None:
    flights = coalescer([])
    flight, _ = flights.lead("k", Accounting(), share=True)
    flight.fail()
    assert flights.joinable("k") is None
    assert flights.waiting == 0


def test_streamed_joiners_save_what_the_answer_cost_once_it_ended() -> None:
    flights = coalescer([])
    _, shared = flights.lead("k", Accounting(), share=True)
    assert shared is not None
    shared.joiners += [Accounting(), Accounting()]
    told: list[int] = []
    flights.settle(shared, 250, told.append)
    assert [joiner.saved_nanos for joiner in shared.joiners] == [250, 250]
    assert told == [250, 250]
    flights.settle(shared, None, told.append)  # an unpriced answer saves nothing countable
    assert told == [250, 250]
