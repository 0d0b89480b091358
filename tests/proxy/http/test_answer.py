"""The request's Outcome keeps a failure as text, and lets go of its tracebacks; the overhead
header's value."""

from __future__ import annotations

import time

from proxy.core.errors import BadRequest, UpstreamError, drop_tracebacks
from proxy.http.answer import Outcome, overhead_ms


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def _chained() -> BaseException:
    """An upstream error raised from a ValueError, while handling a KeyError."""
    try:
        try:
            raise KeyError("first")
        except KeyError:
            cause = _raised(ValueError("cause"))
            raise UpstreamError("upstream broke", upstream_status=500) from cause
    except UpstreamError as error:
        return error


def test_failed_keeps_the_code_message_and_status_not_the_error() -> None:
    outcome = Outcome()
    error = _raised(BadRequest("no model", code="invalid_model"))
    outcome.failed(error, 422)  # type: ignore[arg-type]
    assert (outcome.status, outcome.error_code, outcome.error_message) == (
        422,
        "invalid_model",
        "no model",
    )
    assert not hasattr(outcome, "error")
    assert error.__traceback__ is None


def test_drop_tracebacks_clears_the_whole_chain() -> None:
    error = _chained()
    links = (error, error.__cause__, error.__context__)
    assert all(link is not None and link.__traceback__ is not None for link in links)
    drop_tracebacks(error)
    assert all(link.__traceback__ is None for link in links)  # type: ignore[union-attr]


def test_drop_tracebacks_reaches_a_groups_members_and_survives_a_looping_chain() -> None:
    member = _raised(ValueError("member"))
    group = _raised(ExceptionGroup("several", [member]))  # type: ignore[list-item]
    looping = _raised(RuntimeError("loops"))
    looping.__context__ = group
    group.__context__ = looping
    drop_tracebacks(looping)
    assert (looping.__traceback__, group.__traceback__, member.__traceback__) == (None,) * 3


def test_the_overhead_is_the_time_since_the_start_less_the_upstream_wait() -> None:
    start = time.perf_counter() - 0.5
    value = float(overhead_ms(start, 0.4))
    assert value >= 100.0  # at least the 0.1 s the upstream did not account for
    assert overhead_ms(start, 0.4).count(".") == 1
    assert len(overhead_ms(start, 0.4).split(".")[1]) == 3  # to the microsecond


def test_the_overhead_is_never_negative() -> None:
    assert overhead_ms(time.perf_counter(), 10.0) == "0.000"
