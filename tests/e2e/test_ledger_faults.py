"""The ledger's guarantee under database faults, through the HTTP server: every request the
gateway answered has exactly one ledger record once the database is back, whatever the database
did meanwhile, and the budgets rebuilt at start-up equal what the clients were charged.

A real gateway (the issue's full chain: auth, limits, masking, cache, cost, fallback, retry,
balance; a SQLite ledger) in front of the fake upstream. Each fault is real where it can be made
so as root and without privileges — another connection holding the database's exclusive lock,
the file deleted and later restored from a backup — and injected at the seam where it cannot:
file permissions do not stop writes through descriptors the gateway already holds (and do not
stop root at all), so an unwritable or full database is its writer raising what SQLite raises
then, and a full disk is the journal's ``os.write`` failing halfway with ``ENOSPC``; an
unwritable journal directory is a file taking its path.

Each test runs two waves of requests under the fault. After the first, the fault ends and the
running gateway must recover by itself (held records retried, the journal replayed); after the
second, the gateway is restarted at once, so that the start-up rebuild of the budgets must count
records still in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import sqlite3
import textwrap
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.records import SpendRecord
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.server.app import METRICS, RUNTIME, create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI
from tests.waiting import until

MASTER = "master-key-" + "0123456789abcdef" * 2
WAVE = 24  # answered requests per wave: 20 served (4 of them cache hits), 4 refused
CONCURRENCY = 8
DEADLINE = 60.0  # seconds: the writer retries the database every 5 s; a loaded 2-core machine


def config_text(tmp_path: Path, upstream_url: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: false}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: 600
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
        models:
          chat: [{{target: up/gpt-test, prices: {{input: 10, cache_read: 1, output: 20}}}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - masking: {{entities: {{email: mask}}}}
          - cache: {{}}
          - cost: {{reserve_output_tokens: 100}}
          - fallback: {{}}
          - retry: {{retries: 1}}
          - balance: {{}}
        """
    )


class Gateway:
    """A running gateway app (in this process), its URL and its log stream."""

    def __init__(self, runner: web.AppRunner, url: str, app: web.Application, logs: io.StringIO):
        self.runner = runner
        self.url = url
        self.app = app
        self.logs = logs

    async def mint(self) -> tuple[str, str]:
        headers = {"Authorization": f"Bearer {MASTER}"}
        body = {"alias": "steady", "budget": {"max_usd": 100, "period": "lifetime"}}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/admin/keys", json=body, headers=headers) as response,
        ):
            record = await response.json()
            assert response.status == 201, record
            return record["id"], record["key"]

    def metric(self, name: str) -> float:
        """A ledger series, as ``/metrics`` shows it."""
        value = self.app[METRICS].registry.get_sample_value(name)
        return 0.0 if value is None else value

    def held_warnings(self) -> int:
        return self.logs.getvalue().count('"ledger_records_held"')

    async def rebuilt_spend(self, key_id: str) -> int:
        """The key's spend in nano-dollars as the cost plugin's budget counters hold it."""
        (cost,) = [
            plugin
            for plugin in self.app[RUNTIME].snapshot.plugins
            if type(plugin).__name__ == "CostPlugin"
        ]
        return await cost._counters.spent("key", key_id, "lifetime")


async def serve(tmp_path: Path, upstream_url: str) -> Gateway:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    return Gateway(runner, url, app, logs)


class Answers:
    """What the clients were answered: request id -> nano-dollars charged (0 when refused)."""

    def __init__(self) -> None:
        self.charged: dict[str, int] = {}

    async def wave(self, gateway: Gateway, key: str, tag: str) -> set[str]:
        """``WAVE`` requests, ``CONCURRENCY`` at a time: distinct prompts (with an e-mail
        address to mask), four repeats (cache hits) and four with an unknown key (401).
        Returns their request ids."""
        before = set(self.charged)
        prompts = [f"{tag} question {i}, reply to someone@example.com" for i in range(16)]
        prompts += prompts[:4]
        keys = [key] * len(prompts) + ["sk-cw-" + "x" * 40] * 4
        prompts += ["refused"] * 4
        slots = asyncio.Semaphore(CONCURRENCY)
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(
                *(
                    self._ask(session, gateway.url, k, p, slots)
                    for k, p in zip(keys, prompts, strict=True)
                )
            )
        return set(self.charged) - before

    async def _ask(
        self,
        session: aiohttp.ClientSession,
        url: str,
        key: str,
        prompt: str,
        slots: asyncio.Semaphore,
    ) -> None:
        body = {"model": "chat", "messages": [{"role": "user", "content": prompt}]}
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            slots,
            session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as answer,
        ):
            text = await answer.text()
            assert answer.status in (200, 401), (answer.status, text)
            cost = Decimal(answer.headers.get("x-crossway-cost-usd", "0"))
            self.charged[answer.headers["x-request-id"]] = int(cost * 10**9)

    @property
    def total(self) -> int:
        return sum(self.charged.values())


def ledger_rows(tmp_path: Path) -> Counter[str]:
    """How many ledger records each request id has in the database file."""
    path = tmp_path / "data" / "crossway.db"
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as connection:
        return Counter(row[0] for row in connection.execute("SELECT request_id FROM spend"))


async def settled(gateway: Gateway, tmp_path: Path, answers: Answers) -> None:
    """Wait until nothing is pending here and every answered request is in the database (read
    only once nothing is pending, as the pending count is cheap and the database is not)."""

    def written() -> bool:
        if gateway.metric("crossway_ledger_pending"):
            return False
        return set(ledger_rows(tmp_path)) >= set(answers.charged)

    await until(written, seconds=DEADLINE, what="every answered request in the database")


def assert_one_record_each(tmp_path: Path, answers: Answers) -> None:
    rows = ledger_rows(tmp_path)
    assert set(rows) == set(answers.charged), "records without a request, or the reverse"
    assert [rid for rid, count in rows.items() if count != 1] == []


class Seams:
    """The ledger writer's two seams, the database writer (``SpendRepository.write``) and the
    journal (``Journal.append``), wrapped: which request ids each was offered, and a database
    that fails as SQLite does with ``database_error`` while it is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offered: set[str] = set()
        self.database_error: str | None = None
        write, append = SpendRepository.write, Journal.append

        async def database(repository: SpendRepository, records: Sequence[SpendRecord]) -> None:
            self.offered.update(record.request_id for record in records)
            if self.database_error is not None:
                raise sqlite3.OperationalError(self.database_error)
            await write(repository, records)

        def journal(journal: Journal, records: Sequence[SpendRecord]) -> None:
            self.offered.update(record.request_id for record in records)
            append(journal, records)

        monkeypatch.setattr(SpendRepository, "write", database)
        monkeypatch.setattr(Journal, "append", journal)


class Fault:
    """A database fault: :meth:`start` and :meth:`end` it."""

    def __init__(self, tmp_path: Path, seams: Seams, monkeypatch: pytest.MonkeyPatch) -> None:
        self.database = tmp_path / "data" / "crossway.db"
        self.journal = tmp_path / "data" / "ledger-journal"
        self.seams = seams
        self.monkeypatch = monkeypatch

    def start(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError


class Locked(Fault):
    """Another process holds the database's exclusive lock: every write waits, then fails."""

    def start(self) -> None:
        self.holder = sqlite3.connect(self.database, timeout=30, isolation_level=None)
        self.holder.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        self.holder.execute("ROLLBACK")
        self.holder.close()


class Deleted(Fault):
    """The database file is deleted (a backup taken first), then restored from the backup."""

    def start(self) -> None:
        self.backup = self.database.with_name("backup.db")
        with (
            contextlib.closing(sqlite3.connect(self.database)) as original,
            contextlib.closing(sqlite3.connect(self.backup)) as copy,
        ):
            original.backup(copy)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.database}{suffix}").unlink(missing_ok=True)

    def end(self) -> None:
        self.backup.rename(self.database)


class Unwritable(Fault):
    """The database and its directory cannot be written (the issue's ``chattr +i``): the
    database refuses writes as SQLite does for a read-only file, and the journal's directory
    cannot be made (a file takes its path). Neither takes records: they wait in memory."""

    def start(self) -> None:
        self.seams.database_error = "attempt to write a readonly database"
        self.aside = self.journal.with_name("journal-aside")
        if self.journal.exists():
            self.journal.rename(self.aside)
        self.journal.write_text("")

    def end(self) -> None:
        self.seams.database_error = None
        self.journal.unlink()
        if self.aside.exists():
            self.aside.rename(self.journal)


class DiskFull(Fault):
    """The disk is full: the database cannot grow, and every journal append writes half its
    bytes, then fails with ``ENOSPC``. Neither takes records: they wait in memory."""

    def start(self) -> None:
        self.seams.database_error = "database or disk is full"
        real_write = self.real_write = os.write

        def write(fd: int, data: Any) -> int:
            if bytes(data[:6]) != b'{"id":':  # not a journal append
                return real_write(fd, data)
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        self.monkeypatch.setattr(os, "write", write)

    def end(self) -> None:
        self.seams.database_error = None
        self.monkeypatch.setattr(os, "write", self.real_write)


FAULTS = {"locked": Locked, "deleted": Deleted, "unwritable": Unwritable, "disk_full": DiskFull}


async def under_fault(gateway: Gateway, fault: Fault, key: str, answers: Answers, tag: str) -> None:
    """Fire a wave while ``fault`` lasts; end it once every record of the wave met it (was
    offered to the database or the journal since it started)."""
    fault.seams.offered.clear()
    fault.start()
    try:
        wave = await answers.wave(gateway, key, tag)
        await until(
            lambda: fault.seams.offered >= wave, seconds=DEADLINE, what=f"the fault ({tag})"
        )
    finally:
        fault.end()
    assert gateway.metric("crossway_ledger_dropped_total") == 0


@pytest.mark.parametrize("name", FAULTS)
async def test_every_answered_request_has_one_ledger_record_after_a_database_fault(
    name: str, tmp_path: Path, upstream: tuple[FakeOpenAI, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, upstream_url = upstream
    gateway = await serve(tmp_path, upstream_url)
    answers = Answers()
    try:
        key_id, key = await gateway.mint()
        await answers.wave(gateway, key, "before")
        await settled(gateway, tmp_path, answers)
        fault = FAULTS[name](tmp_path, Seams(monkeypatch), monkeypatch)
        await under_fault(gateway, fault, key, answers, "first")
        await settled(gateway, tmp_path, answers)  # recovered in place, no restart
        assert_one_record_each(tmp_path, answers)
        await under_fault(gateway, fault, key, answers, "second")
    finally:
        await gateway.runner.cleanup()  # at once: records may still be in the journal
    assert len(answers.charged) == 3 * WAVE
    assert gateway.metric("crossway_ledger_dropped_total") == 0
    gateway = await serve(tmp_path, upstream_url)
    try:
        assert await gateway.rebuilt_spend(key_id) == answers.total
        await settled(gateway, tmp_path, answers)
        assert_one_record_each(tmp_path, answers)
        assert gateway.metric("crossway_ledger_dropped_total") == 0
    finally:
        await gateway.runner.cleanup()
