"""Several ``crossway serve`` processes over one Redis and one PostgreSQL, for the scale-out
tests: the config they share, and an HTTP client that opens a new connection per request (so
that ``SO_REUSEPORT`` spreads requests over the workers of one port)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from tests.e2e.processes import Served, free_port, serve

MASTER = "master-key-for-the-scaleout-tests-0123456789"
LIMITED = "sk-cw-limited-key-for-scaleout-tests-0123456789"
FREE = "sk-cw-free-key-for-scaleout-tests-0123456789ab"
BUDGETED = "sk-cw-budgeted-key-for-scaleout-tests-01234567"
BUDGET_USD = 0.0001
"""The budgeted key's daily budget: about 14 requests of ``chat``'s size (the mock's prices)."""
COST = "  - cost: {reserve_output_tokens: 10}\n"
"""The cost plugin, for ``plugins=``: budgets and the ledger."""


def config(
    port: int,
    *,
    redis_url: str,
    database_url: str,
    workers: int = 1,
    extra: str = "",
    plugins: str = "",
    cluster: bool = False,
) -> str:
    """The config every instance of a test shares (``port`` aside); ``cluster``: the Redis URL
    names a node of a Redis Cluster."""
    return (
        textwrap.dedent(
            f"""
        server: {{port: {port}, workers: {workers}, access_log: false}}
        providers:
          mock: {{type: mock, faults: true}}
        models:
          echo: [{{target: mock/echo}}]
          slow: [{{target: mock/slow-300}}]
        database: {{url: "{database_url}"}}
        state:
          backend: redis
          redis:
            url: "{redis_url}"
            cluster: {"true" if cluster else "false"}
            timeout_ms: 1000          # generous: a loaded test machine is slow
            breaker: {{failures: 2, cooldown_ms: 200}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: 60
          keys:
            - {{key: "{LIMITED}", alias: limited, rpm: 60}}
            - {{key: "{FREE}", alias: free}}
            - {{key: "{BUDGETED}", alias: budgeted, budget: {{max_usd: {BUDGET_USD}, period: 1d}}}}
        plugins:
          - auth: {{}}
          - limits: {{}}
          - cache: {{backend: store, scope: key}}
        """
        )
        + textwrap.dedent(extra)
        + plugins
    )


@contextlib.contextmanager
def instances(
    tmp_path: Path, count: int, *, workers: int = 1, **options: str | bool
) -> Iterator[list[Served]]:
    """``count`` gateway processes (each with ``workers``) on their own ports."""
    with contextlib.ExitStack() as stack:
        served = []
        for index in range(count):
            port = free_port()
            path = tmp_path / f"gateway-{index}.yaml"
            path.write_text(config(port, workers=workers, **options))  # type: ignore[arg-type]
            served.append(
                stack.enter_context(
                    serve(
                        path,
                        port,
                        workers,
                        tmp_path / f"gateway-{index}.log",
                        env={"CROSSWAY_DATA_DIR": str(tmp_path / f"data-{index}")},
                    )
                )
            )
        yield served


class Client:
    """HTTP to the gateways; a new connection for every request."""

    def __init__(self) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            timeout=aiohttp.ClientTimeout(total=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def chat(
        self,
        url: str,
        key: str,
        text: str = "hi",
        headers: dict[str, str] | None = None,
        model: str = "echo",
    ) -> tuple[int, dict[str, str]]:
        status, response_headers, _ = await self.completion(url, key, text, headers, model)
        return status, response_headers

    async def completion(
        self,
        url: str,
        key: str,
        text: str = "hi",
        headers: dict[str, str] | None = None,
        model: str = "echo",
        max_tokens: int | None = None,
    ) -> tuple[int, dict[str, str], dict]:
        """One chat completion: its status, headers (names in lower case) and JSON body."""
        body: dict = {"model": model, "messages": [{"role": "user", "content": text}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        async with self.session.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}", **(headers or {})},
        ) as response:
            headers = {name.lower(): value for name, value in response.headers.items()}
            return response.status, headers, json.loads(await response.read())

    async def budgeted(
        self, url: str, key: str, text: str, *, settle: float = 2.0
    ) -> tuple[int, dict[str, str], dict]:
        """One completion of ``max_tokens`` 10 for a budgeted key, asked again while it is
        refused for up to ``settle`` seconds: the correction of a request another instance just
        served is sent after its reply, off its path, so a refusal that comes a moment before it
        lands still counts that request's reservation. A refusal that outlasts ``settle`` is one
        of the spend alone."""
        loop = asyncio.get_running_loop()
        until = loop.time() + settle
        while True:
            answer = await self.completion(url, key, text, max_tokens=10)
            if answer[0] != 429 or loop.time() > until:
                return answer
            await asyncio.sleep(0.05)

    async def admin(
        self, method: str, url: str, path: str, body: object = None
    ) -> tuple[int, dict]:
        async with self.session.request(
            method,
            f"{url}{path}",
            data=None if body is None else json.dumps(body),
            headers={"authorization": f"Bearer {MASTER}", "content-type": "application/json"},
        ) as response:
            text = await response.text()
            return response.status, json.loads(text) if text else {}

    async def metric(self, url: str, name: str, **labels: str) -> float:
        """One sample of ``url``'s ``/metrics`` (summed over matching lines; 0 when absent)."""
        return sum(await self.samples(url, name, **labels))

    async def samples(self, url: str, name: str, **labels: str) -> list[float]:
        """Every sample of ``name`` in ``url``'s ``/metrics`` whose labels match, one per line."""
        async with self.session.get(f"{url}/metrics") as response:
            text = await response.text()
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        return [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and line[len(name)] in "{ " and all(w in line for w in wanted)
        ]


async def poll(condition, *, seconds: float, what: str, every: float = 0.01) -> float:
    """Await ``condition()`` (a coroutine function returning bool) until it holds, trying
    ``every`` seconds; the seconds it took. Fails after ``seconds``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not await condition():
        if loop.time() - started > seconds:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(every)
    return loop.time() - started
