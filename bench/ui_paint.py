"""``python -m bench.ui_paint``: how fast the admin UI's pages paint over a big database.

It seeds a fresh SQLite database directly (``--keys`` virtual keys in ``--teams`` teams and
``--rows`` ledger records spread over the last ``--days`` days), starts ``crossway serve`` on
it (127.0.0.1), signs in once in headless Chromium (Debian's ``/usr/bin/chromium``, through
Playwright) and then loads every page ``--rounds`` times as a fresh navigation, reporting per
page the median of

- **first paint**: the browser's ``first-contentful-paint`` (the shell, before any data), and
- **data shown**: from navigation start until the page's first row of data is in the DOM (the
  admin API's answer rendered), read as ``performance.now()`` in the page.

Every list is paginated server-side, so the figures should not grow with the number of keys or
records on the keys and request-log pages; the spend and teams pages sum the ledger over their
range (30 days; all time for teams) and do grow with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from proxy.db import Database

MASTER = "bench-master-" + "0123456789abcdef" * 2
# What shows that a page's data arrived (Playwright selectors: the strict CSP refuses the
# string evaluation that wait_for_function would need).
PAGES = {
    "overview": "#card-requests >> text=/^[0-9]/",
    "keys": "tbody tr[data-key-id]",
    "teams": "tbody tr[data-team]",
    "spend": "#spend-totals tbody tr",
    "logs": "tbody tr[data-request-id]",
    "models": "tbody tr",
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MODELS = ("chat", "fast", "smart", "embed", "vision")


def _text(moment: datetime) -> str:
    """A time as SQLAlchemy keeps a UtcDateTime in SQLite (naive UTC, microseconds)."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def seed(path: Path, keys: int, teams: int, rows: int, days: int) -> None:
    """Create the schema (the gateway's migrations) and fill it directly."""

    async def migrate() -> None:
        database = Database(f"sqlite:///{path}")
        await database.open()
        await database.close()

    asyncio.run(migrate())
    rng = random.Random(19)
    now = datetime.now(UTC).replace(tzinfo=None)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA synchronous=OFF")
        db.executemany(
            "INSERT INTO teams (id, created_at, updated_at) VALUES (?, ?, ?)",
            [(f"team-{t:02d}", _text(now), _text(now)) for t in range(teams)],
        )
        db.executemany(
            "INSERT INTO keys (id, key_hash, key_prefix, alias, team, blocked, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
            [
                (
                    f"key_{k:016x}",
                    f"{k:064x}",
                    f"sk-cw-{k:04x}"[:10],
                    f"service-{k}",
                    f"team-{k % teams:02d}",
                    _text(now - timedelta(seconds=keys - k)),
                    _text(now),
                )
                for k in range(keys)
            ],
        )
        span = days * 86_400
        batch = []
        for i in range(rows):
            moment = now - timedelta(seconds=rng.random() * span)
            k = rng.randrange(keys)
            batch.append(
                (
                    f"r{i:016x}",
                    f"req-{i}",
                    _text(moment),
                    moment.strftime("%Y-%m-%d"),
                    f"key_{k:016x}",
                    f"service-{k}",
                    f"team-{k % teams:02d}",
                    "openai",
                    MODELS[i % len(MODELS)],
                    "up",
                    "gpt-test",
                    rng.randrange(10, 2000),
                    rng.randrange(0, 200),
                    rng.randrange(10, 800),
                    rng.randrange(1, 5) * 1_000_000,
                    "estimated",
                    200 if i % 50 else 429,
                    rng.random() * 900,
                    1,
                )
            )
            if len(batch) == 50_000:
                _insert_spend(db, batch)
                batch = []
        _insert_spend(db, batch)
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _insert_spend(db: sqlite3.Connection, batch: list[tuple[object, ...]]) -> None:
    db.executemany(
        "INSERT INTO spend (id, request_id, time, day, key_id, key_alias, team, dialect, model,"
        " provider, upstream_model, input_tokens, cache_read_tokens, cache_write_tokens,"
        " output_tokens, reasoning_tokens, cost_nanos, cost_source, status, duration_ms,"
        " attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?, ?, ?, ?, ?)",
        batch,
    )


def start_gateway(scratch: Path, database: Path, port: int) -> subprocess.Popen[bytes]:
    config = scratch / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: false}}
            database: {{url: "sqlite:///{database}"}}
            auth: {{master_key: "{MASTER}"}}
            providers: {{mock: {{type: mock}}}}
            models: {{{", ".join(f"{m}: [{{target: mock/{m}}}]" for m in MODELS)}}}
            plugins: [{{auth: {{}}}}, {{cost: {{}}}}]
            """
        )
    )
    log = (scratch / "gateway.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300  # a big database migrates first
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=1):
                return process
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"the gateway did not start: see {scratch / 'gateway.log'}")


async def measure(url: str, rounds: int, profile: Path) -> dict[str, dict[str, float]]:
    from playwright.async_api import async_playwright

    results: dict[str, dict[str, float]] = {}
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile), executable_path="/usr/bin/chromium", args=FLAGS, headless=True
        )
        page = await context.new_page()
        await page.goto(f"{url}/ui/")
        await page.get_by_label("Master key").fill(MASTER)
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_selector(PAGES["overview"], timeout=60_000)
        for name, condition in PAGES.items():
            paints, shown = [], []
            for _ in range(rounds):
                await page.goto(f"{url}/ui/#/{name}")
                await page.reload()
                await page.wait_for_selector(condition, timeout=60_000)
                done = await page.evaluate("performance.now()")
                fcp = await page.evaluate(
                    "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null"
                )
                paints.append(fcp)
                shown.append(done)
            results[name] = {
                "first_paint_ms": round(statistics.median(p for p in paints if p is not None), 1),
                "data_shown_ms": round(statistics.median(shown), 1),
            }
        await context.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18_919)
    parser.add_argument(
        "--database", type=Path, help="a database seeded by an earlier run (seeded when missing)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crossway-ui-paint-") as scratch_name:
        scratch = Path(scratch_name)
        database = args.database or scratch / "crossway.db"
        if not database.exists():
            started = time.monotonic()
            seed(database, args.keys, args.teams, args.rows, args.days)
            print(
                f"seeded {args.keys} keys, {args.rows} ledger rows in "
                f"{time.monotonic() - started:.1f} s",
                file=sys.stderr,
            )
        gateway = start_gateway(scratch, database, args.port)
        try:
            results = asyncio.run(
                measure(f"http://127.0.0.1:{args.port}", args.rounds, scratch / "profile")
            )
        finally:
            gateway.terminate()
            gateway.wait(timeout=20)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'page':<10} {'first paint':>12} {'data shown':>12}   (median of {args.rounds})")
    for name, figures in results.items():
        print(
            f"{name:<10} {figures['first_paint_ms']:>9.1f} ms {figures['data_shown_ms']:>9.1f} ms"
        )


if __name__ == "__main__":
    main()
