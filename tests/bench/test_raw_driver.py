"""The raw load driver (``--driver raw``): its request bytes against aiohttp's client's, its
closed loop's counting, and the benchmark matrix measured through it."""

from contextlib import ExitStack
from pathlib import Path

import aiohttp

from bench import aio
from bench.driver import LoadSpec
from bench.matrix import DIRECT, Settings, plan, run_matrix
from bench.raw_driver import LoadSession, request_bytes, run_load
from bench.targets import start_passthrough, start_upstream
from tests.bench.raw_server import STREAM, STREAM_HEAD, chunked


async def test_the_request_bytes_are_those_aiohttp_s_client_sends(serve) -> None:
    raw = await serve(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    url = f"http://127.0.0.1:{raw.port}/v1/chat/completions"
    extra = (("Authorization", "Bearer sk-cw-bench"),)
    body = b'{"model":"m"}'
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Type": "application/json", **dict(extra)}
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
    assert raw.requests == [request_bytes(url, body, extra)]


async def test_the_driver_counts_statuses_and_unfinished_streams_as_errors(serve) -> None:
    answers = iter(
        [
            [b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\nno"],
            [STREAM_HEAD + chunked(b"data: {}\n\n")],  # no [DONE]
        ]
    )
    raw = await serve(lambda _: next(answers, [STREAM_HEAD + STREAM]))
    spec = LoadSpec(
        url=f"http://127.0.0.1:{raw.port}/v1/chat/completions",
        stream=True,
        concurrency=1,
        duration_s=5,
        max_requests=5,
    )
    async with LoadSession(5) as session:
        result = await run_load(session, spec)
    assert dict(result.errors) == {"HTTP 500": 1, "missing data: [DONE]": 1}
    assert result.succeeded == 3
    assert len(result.ttfb_s) == 3
    assert raw.connections == 1  # one keep-alive connection carried all five


async def _measure(stack: ExitStack, scratch: Path) -> list:
    upstream = await start_upstream(stack, scratch)
    passthrough = await start_passthrough(stack, scratch, upstream)
    cells = plan(("passthrough",), (False, True), (0,), (1, 8))
    servers = {DIRECT: upstream, "passthrough": passthrough}
    settings = Settings(
        duration_s=0.6,
        warmup_s=0.1,
        max_requests=20_000,
        request_timeout_s=5.0,
        rounds=2,
        driver="raw",
    )
    return await run_matrix(cells, servers, upstream, settings, lambda result: None)


def test_the_matrix_measures_both_modes_through_the_raw_driver(tmp_path: Path) -> None:
    with ExitStack() as stack:
        results = aio.run(_measure(stack, tmp_path))
    assert len(results) == 6
    for result in results:
        assert result.errors == {}, result.cell
        assert result.requests > 0, result.cell
    assert results[-1].ttfb_p50_ms is not None
