"""Media units in the ledger, end to end: a speech, a transcription, an image and a rerank go
through the real server to the mock provider with the openai SDK (and a plain HTTP client for
rerank), and their spend records carry what each was billed — characters, seconds, images of
a size and quality, search units — on ``/admin/spend/logs`` and on LiteLLM's ``/spend/logs``,
and ``/admin/spend`` sums them per group."""

from __future__ import annotations

import asyncio
import io
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.test_media import wav

MASTER = "master-key-" + "fedcba9876543210" * 2
KEY = "sk-cw-units-" + "abcdefghij" * 4
DIALECTS = {"openai_speech", "openai_transcriptions", "openai_images", "rerank"}


def config_text(tmp_path: Path) -> str:
    return textwrap.dedent(
        f"""
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          keys: [{{key: "{KEY}", alias: units}}]
        providers:
          mock: {{type: mock}}
        models:
          tts: [{{target: mock/tts-1}}]
          whisper: [{{target: mock/whisper-1}}]
          painter: [{{target: mock/dall-e-3}}]
          ranker: [{{target: mock/rerank-v3.5}}]
          omni: [{{target: mock/omni-moderation-latest}}]
        plugins:
          - auth: {{}}
          - cost: {{}}
        """
    )


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    config = tmp_path / "gateway.yaml"
    config.write_text(config_text(tmp_path))
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    yield url
    await runner.cleanup()


async def records_of(url: str, path: str, count: int) -> list[dict[str, Any]]:
    """The media records ``path`` lists, once ``count`` of them are there (the ledger is
    written off the request path)."""
    headers = {"Authorization": f"Bearer {MASTER}"}
    deadline = asyncio.get_running_loop().time() + 10
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(url + path, headers=headers) as answer:
                assert answer.status == 200
                listed = await answer.json()
            rows = listed["data"] if isinstance(listed, dict) else listed
            media = [row for row in rows if _dialect(row) in DIALECTS]
            if len(media) >= count or asyncio.get_running_loop().time() > deadline:
                return media
            await asyncio.sleep(0.05)


def _dialect(row: dict[str, Any]) -> str:
    return str(row.get("dialect") or row["metadata"]["dialect"])


async def test_each_media_record_carries_the_units_it_was_billed(gateway: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    await client.audio.speech.create(model="tts", voice="alloy", input="y" * 1234)
    await client.audio.transcriptions.create(model="whisper", file=("a.wav", wav(2.5)))
    await client.images.generate(
        model="painter", prompt="a lighthouse", quality="hd", size="1024x1024", n=2
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            gateway + "/v1/rerank",
            json={"model": "ranker", "query": "q", "documents": ["d"] * 150},
            headers={"Authorization": f"Bearer {KEY}"},
        ) as answer,
    ):
        assert answer.status == 200
    await client.close()

    records = await records_of(gateway, "/admin/spend/logs", 4)
    units = {record["dialect"]: record["media_units"] for record in records}
    assert units == {
        "openai_speech": {"characters": 1234},
        "openai_transcriptions": {"audio_seconds": 2.5},
        "openai_images": {"images": 2, "image_size": "1024x1024", "image_quality": "hd"},
        "rerank": {"search_units": 2},
    }
    costs = {record["dialect"]: record["cost_usd"] for record in records}
    assert costs["openai_speech"] == pytest.approx(1234 * 0.000015)
    assert costs["rerank"] == pytest.approx(2 * 0.002)

    rows = await records_of(gateway, "/spend/logs", 4)
    litellm = {row["metadata"]["dialect"]: row["metadata"]["media_units"] for row in rows}
    assert litellm == units
    assert {row["metadata"]["dialect"]: row["call_type"] for row in rows} == {
        "openai_speech": "aspeech",  # LiteLLM's CallTypes
        "openai_transcriptions": "atranscription",
        "openai_images": "aimage_generation",
        "rerank": "arerank",
    }

    async with (
        aiohttp.ClientSession() as session,
        session.get(
            gateway + "/admin/spend?group_by=model", headers={"Authorization": f"Bearer {MASTER}"}
        ) as answer,
    ):
        totals = await answer.json()
    summed = {
        row["model"]: (row["audio_seconds"], row["characters"], row["images"], row["search_units"])
        for row in totals["data"]
    }
    assert summed == {
        "tts": (0.0, 1234, 0, 0),
        "whisper": (2.5, 0, 0, 0),
        "painter": (0.0, 0, 2, 0),
        "ranker": (0.0, 0, 0, 2),
    }
    total = totals["total"]
    assert (total["audio_seconds"], total["characters"], total["images"]) == (2.5, 1234, 2)


async def test_a_moderation_record_has_no_media_units(gateway: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    await client.moderations.create(model="omni", input="hello")
    await client.close()
    headers = {"Authorization": f"Bearer {MASTER}"}
    deadline = asyncio.get_running_loop().time() + 10
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(gateway + "/admin/spend/logs", headers=headers) as answer:
                rows = (await answer.json())["data"]
            if rows or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
    assert [row["dialect"] for row in rows] == ["openai_moderations"]
    assert rows[0]["media_units"] is None
