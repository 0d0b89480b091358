"""Fixtures for the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _data_dir_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A config that names no database keeps it in ``$CROSSWAY_DATA_DIR`` (``./data`` by
    default): point it at a temporary directory, for this process and the gateways it starts,
    so that no test writes a database into the checkout."""
    patch = pytest.MonkeyPatch()
    patch.setenv("CROSSWAY_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    yield
    patch.undo()
