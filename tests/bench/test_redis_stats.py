"""The bench's Redis relay: commands and writes counted on their way to a real redis-server."""

from __future__ import annotations

import asyncio

from bench.redis_stats import CommandCounter, _Commands
from proxy.state.config import RedisConfig
from proxy.state.redis import RedisStore
from proxy.state.store import RateBucket
from tests.engines import RedisServer


async def test_the_relay_counts_what_a_client_sends_and_forwards_it(redis_server: RedisServer):
    relay = CommandCounter(redis_server.port)
    await relay.start()
    store = RedisStore(RedisConfig(url=f"redis://127.0.0.1:{relay.port}/0", timeout_ms=5000))
    try:
        await store.start()
        started = relay.commands
        await store.set("bench:k", b"v", ttl=60)
        assert await store.get("bench:k") == b"v"
        await store.rate_take([RateBucket("bench:r1", 1, 10), RateBucket("bench:r2", 1, 10)])
        assert relay.commands - started == 3, "a script is one command, whatever it runs"
        await asyncio.gather(*(store.get(f"bench:{i}") for i in range(20)))
        assert relay.commands - started == 23
        assert relay.by_name["GET"] >= 21
    finally:
        await store.close()
        await relay.close()
    assert relay.writes < relay.commands, "pipelined commands share writes"


def test_commands_split_across_reads_are_counted_once_whole():
    parser = _Commands()
    command = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n*2\r\nx\r\n"  # a value that looks like RESP
    assert parser.feed(command[:7]) == []
    assert parser.feed(command[7:] + command[:3]) == ["SET"]
    assert parser.feed(command[3:]) == ["SET"]
