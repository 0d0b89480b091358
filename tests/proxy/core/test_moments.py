"""proxy/core/moments.py: instants a client names are parsed into UTC within 1970..9998, and
anything else is a 400 naming the parameter, never an overflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from proxy.core.errors import BadRequest
from proxy.core.moments import EARLIEST, LATEST, moment_after, parse_moment, utc_moment


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01T10:00:00+02:00", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        ("1970-01-01T00:00:00Z", EARLIEST),
        ("9998-12-31T23:59:59.999999Z", LATEST - timedelta(microseconds=1)),
    ],
)
def test_times_and_dates_are_utc(text: str, expected: datetime) -> None:
    assert parse_moment(text, "from") == expected


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59-14:00",  # past year 9999 in UTC: an overflow before
        "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
        "9999-01-01",
        "1969-12-31T23:59:59Z",
        "0001-01-01",
        "yesterday",
        "",
        "2026-13-01",
        "\uff12\uff10\uff12\uff16-12-01",  # full-width digits
        "2026-12-01\x00",
    ],
)
def test_anything_else_is_a_400_naming_the_parameter(text: str) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_moment(text, "to")
    assert raised.value.param == "to"
    assert raised.value.status == 400


def test_an_aware_time_is_bounded_too() -> None:
    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=14)))
    with pytest.raises(BadRequest) as raised:
        utc_moment(far, "expires_at")
    assert raised.value.param == "expires_at"
    assert utc_moment(datetime(2030, 1, 1), "x") == datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "seconds", [10**20, 10**9 * 86_400, int((LATEST - EARLIEST).total_seconds())]
)
def test_a_duration_that_ends_beyond_the_bound_is_a_400(seconds: int) -> None:
    with pytest.raises(BadRequest) as raised:
        moment_after(datetime(2026, 12, 1, tzinfo=UTC), seconds, "duration")
    assert raised.value.param == "duration"
    start = datetime(2026, 12, 1, tzinfo=UTC)
    assert moment_after(start, 86_400, "duration") == start + timedelta(days=1)
