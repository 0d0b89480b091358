"""Fixtures and rules for the whole suite.

A test never skips. One that cannot run here fails, saying what it needs: a skipped test reads
as green (a run that skipped the schema validation of every dialect once exited 0). So a skip —
``pytest.skip``, ``skipif``, ``importorskip``, a module-level skip — is reported as a failure.
Tests that are not meant to run in ``make test`` are not collected (or are deselected), rather
than skipped.

Nor does a test time anything: hypothesis runs without its per-example deadline and without
its "input generation is slow" health check, both of which fail a correct test on a loaded
machine (timing belongs in ``bench/``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("crossway", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("crossway")


@pytest.fixture(autouse=True, scope="session")
def _data_dir_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A config that names no database keeps it in ``$CROSSWAY_DATA_DIR`` (``./data`` by
    default): point it at a temporary directory, for this process and the gateways it starts,
    so that no test writes a database into the checkout."""
    patch = pytest.MonkeyPatch()
    patch.setenv("CROSSWAY_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    yield
    patch.undo()


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, which this suite treats as a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, object, None]:
    outcome = yield
    _as_failure(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, None]:
    outcome = yield
    _as_failure(outcome.get_result())  # type: ignore[attr-defined]
