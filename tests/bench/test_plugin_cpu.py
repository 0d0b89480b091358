"""bench/plugin_cpu.py: the cache evictor writes every line of its buffer, a measurement with
eviction times the requests and not the eviction, and the command runs end to end with and
without it (no CPU figure of the gateway's code is asserted)."""

from __future__ import annotations

import time

import pytest

from bench import plugin_cpu
from bench.plugin_cpu import CacheEvictor, chains, cpu_per_request
from proxy.canonical import RawFrames, batched


def test_the_evictor_writes_one_byte_in_every_cache_line() -> None:
    evictor = CacheEvictor(10 * CacheEvictor.LINE + 1)
    evictor()
    buffer = evictor._buffer
    touched = [offset for offset, byte in enumerate(buffer) if byte]
    assert touched == list(range(0, len(buffer), CacheEvictor.LINE))
    with pytest.raises(ValueError, match="at least 64 bytes"):
        CacheEvictor(CacheEvictor.LINE - 1)


async def test_the_eviction_is_not_timed() -> None:
    chain = chains(plugins="cost")["empty"]
    calls = 0

    def slow_evict() -> None:  # burns CPU a request would show if it were timed
        nonlocal calls
        calls += 1
        until = time.process_time() + 0.002
        while time.process_time() < until:
            pass

    timed = await cpu_per_request(chain, False, 20, slow_evict)
    assert calls == 20
    assert timed < 2000  # µs per request: 2 ms of eviction after each would show as more


@pytest.mark.parametrize("stream", [False, True])
async def test_requests_run_to_their_end_with_eviction(stream: bool) -> None:
    chain = chains(plugins="cost-budget")["plugins"]
    ended = 0
    one = chain.one

    async def counted(streamed: bool) -> None:
        nonlocal ended
        await one(streamed)
        ended += 1

    chain.one = counted  # type: ignore[method-assign]
    assert await cpu_per_request(chain, stream, 5, CacheEvictor(4096)) > 0
    await chain.close()
    assert ended == 5


def test_the_command_prints_each_mode_with_and_without_eviction(capsys) -> None:
    for extra, caches in (([], "warm caches"), (["--evict-mib", "0.01"], "caches evicted")):
        status = plugin_cpu.main(["--plugins", "auth", "--requests", "20", "--rounds", "1", *extra])
        assert status == 0
        printed = capsys.readouterr().out
        assert caches in printed
        assert "auth+limits" in printed
        for mode in plugin_cpu.MODES:
            assert f"  {mode:<10}  empty chain" in printed


def test_a_negative_eviction_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin_cpu.main(["--evict-mib", "-1"])
    assert exited.value.code == 2
    assert "must not be negative" in capsys.readouterr().err


@pytest.mark.parametrize("relay", [False, True])
async def test_a_stream_request_carries_as_many_chunks_as_asked(relay: bool) -> None:
    reply = await plugin_cpu._Upstream(relay, chunks=130)(plugin_cpu._call(stream=True))
    source = batched(reply.stream)  # type: ignore[arg-type]
    chunks = usage = 0
    while batch := await source.next_batch(True):
        for item in batch:
            if isinstance(item, RawFrames):
                chunks += item.count
            elif item.usage is not None:
                usage += 1
            else:
                chunks += 1
    assert (chunks, usage) == (130, 1)


def test_the_command_takes_the_stream_length_and_refuses_a_bad_one(capsys) -> None:
    status = plugin_cpu.main(
        ["--plugins", "cost", "--requests", "5", "--rounds", "1", "--chunks", "70"]
    )
    assert status == 0
    assert "70-chunk streams" in capsys.readouterr().out
    for bad in ("0", "7"):
        with pytest.raises(SystemExit) as exited:
            plugin_cpu.main(["--chunks", bad])
        assert exited.value.code == 2
        assert "multiple of 5" in capsys.readouterr().err
