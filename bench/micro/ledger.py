"""``python -m bench.micro ledger``: how many spend records per second the ledger writes to its
database (SQLite, or PostgreSQL with ``--database postgresql://…``).

The records go the way the gateway sends them: :meth:`LedgerWriter.record` (the request path's
only step) for every record, the writer's background task batching them (500 at most, every
second at least) through :class:`~proxy.governance.ledger.spend_db.SpendRepository` into a fresh
SQLite file, or into the ``--database`` given — a database of the bench's own: each round empties
its ``spend`` table first.
It reports the sustained rate — records in the database over the wall time from the first
record queued to the writer's close, which returns once the last is committed — and the
request path's CPU per record, over
``--records`` records offered at ``--offered`` records per second (0: as fast as the loop can),
in ``--rounds`` rounds, each on a new database.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import structlog

from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.db.schema import spend
from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.records import RecordIds, SpendRecord
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.governance.ledger.writer import LedgerWriter


def _record(ids: RecordIds, i: int) -> SpendRecord:
    return SpendRecord(
        id=ids(),
        request_id=f"bench-{i}",
        time=time.time(),
        key_id=f"key_{i % 50:04d}",
        key_alias="bench",
        team=f"team-{i % 5}",
        user=None,
        dialect="openai",
        model="fast",
        provider="upstream",
        upstream_model="gpt-4o-mini",
        input_tokens=40,
        cache_read_tokens=10,
        cache_write_tokens=0,
        output_tokens=30,
        reasoning_tokens=0,
        cost_nanos=24_750,
        cost_source="estimated",
        saved_nanos=None,
        status=200,
        error_code=None,
        duration_ms=12.5,
        ttft_ms=None,
        attempts=1,
        fallback=None,
        cache=None,
    )


async def one_round(
    directory: Path, records: int, offered: float, url: str | None = None
) -> tuple[float, float, int]:
    """(records per second into the database, request-path µs CPU per record, journaled)."""
    database = Database(url or f"sqlite:///{directory}/ledger.db")
    await database.open()  # creating and migrating the schema is not part of the rate
    if url is not None:
        async with database.connect() as connection:
            await connection.execute(spend.delete())
    metrics = Metrics()
    writer = LedgerWriter(
        SpendRepository(database), Journal(directory / "journal"), metrics, structlog.get_logger()
    )
    ids = RecordIds()
    batch = [_record(ids, i) for i in range(records)]
    started = time.perf_counter()
    path_cpu = 0.0
    pause = 0.0 if offered <= 0 else 100 / offered
    for i in range(0, records, 100):
        cpu = time.process_time()
        for record in batch[i : i + 100]:
            writer.record(record)
        path_cpu += time.process_time() - cpu
        await asyncio.sleep(pause)  # the loop also serves the writer, as it serves requests
    await writer.close()  # everything queued is in the database once it returns
    elapsed = time.perf_counter() - started
    journaled = int(metrics.registry.get_sample_value("crossway_ledger_journaled_total") or 0)
    await database.close()
    return records / elapsed, path_cpu / records * 1e6, journaled


async def measure(
    records: int, offered: float, rounds: int, url: str | None = None
) -> list[tuple[float, float, int]]:
    """Every round's figures."""
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="crossway-ledger-") as directory:
            results.append(await one_round(Path(directory), records, offered, url))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds and print the rate."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro ledger", description=__doc__)
    parser.add_argument("--records", type=int, default=50_000, help="records per round")
    parser.add_argument(
        "--offered", type=float, default=0.0, help="records per second offered (0: at once)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--database",
        default=None,
        help="a database URL of the bench's own (its spend table is emptied); default: SQLite",
    )
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.records, args.offered, args.rounds, args.database))
    rates = [rate for rate, _, _ in results]
    cpu = [path for _, path, _ in results]
    journaled = sum(j for _, _, j in results)
    engine = "PostgreSQL" if (args.database or "").startswith("postgres") else "SQLite"
    print(
        f"ledger into {engine}, "
        f"{args.rounds} rounds of {args.records} records: "
        f"median {statistics.median(rates):,.0f} records/s (rounds "
        f"{min(rates):,.0f}..{max(rates):,.0f}); request path "
        f"{statistics.median(cpu):.2f} µs CPU per record; journaled {journaled}"
    )
    return 0
