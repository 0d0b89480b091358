"""Instants a client names (spend ranges, key expiries): parsed and bounded in one place.

Every instant taken from a request is an aware UTC ``datetime`` from :data:`EARLIEST` up to
(not including) :data:`LATEST`: nothing the gateway records is older than the Unix epoch, and a
day's arithmetic past any accepted instant (a range's whole days, a rollup's next midnight)
stays within what ``datetime`` and the databases hold. Anything else — text that is no time, an
offset that takes it past year 9999 or before year 1, a duration that ends beyond the bound —
is a :class:`~proxy.core.errors.BadRequest` (400) naming the parameter, never an overflow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from proxy.core.errors import BadRequest

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
_RANGE = "from 1970 to 9998"


def utc_moment(moment: datetime, param: str) -> datetime:
    """``moment`` in UTC (a naive one is taken as UTC); a 400 naming ``param`` when it lies
    outside [:data:`EARLIEST`, :data:`LATEST`)."""
    try:
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # an offset that takes it past year 9999 or before year 1
        raise _out_of_range(param) from None
    if not EARLIEST <= moment < LATEST:
        raise _out_of_range(param)
    return moment


def parse_moment(text: str, param: str) -> datetime:
    """An RFC 3339 time (``2026-12-01T00:00:00Z``) or a UTC date (``2026-12-01``), as
    :func:`utc_moment` bounds it; a 400 naming ``param`` for anything else."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(
            f"{param}: expected an RFC 3339 time or a date (2026-12-01) {_RANGE}", param=param
        ) from None
    return utc_moment(moment, param)


def moment_after(start: datetime, seconds: int, param: str) -> datetime:
    """``seconds`` after ``start``; a 400 naming ``param`` when that is :data:`LATEST` or
    later (however many seconds: never an overflow)."""
    if seconds >= (LATEST - start).total_seconds():
        raise BadRequest(f"{param}: ends after the year 9998", param=param)
    return utc_moment(start + timedelta(seconds=seconds), param)


def _out_of_range(param: str) -> BadRequest:
    return BadRequest(f"{param}: expected a time {_RANGE}", param=param)
