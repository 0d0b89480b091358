"""The request's Outcome keeps a failure as text, and lets go of its tracebacks."""

from __future__ import annotations

from proxy.core.errors import BadRequest, UpstreamError, drop_tracebacks
from proxy.http.answer import Outcome


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
