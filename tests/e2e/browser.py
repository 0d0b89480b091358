"""Headless Chromium for the UI tests: Debian's ``chromium`` driven by Playwright.

Playwright's own browser download is not reachable, so the system browser is launched by its
path with a fresh profile; ``make test`` installs it (``make browser``). Without it a test fails
with a message saying so, never skips.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> Path:
    """The system Chromium; fails the test when it is not installed."""
    if CHROMIUM.exists():
        return CHROMIUM
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "the UI tests need Debian's chromium at /usr/bin/chromium: run `make browser` "
            "(apt-get install chromium)"
        )
    return Path(found)


@contextlib.asynccontextmanager
async def browser(
    profile: Path, viewport: dict[str, int] = LAPTOP
) -> AsyncIterator[BrowserContext]:
    """A fresh headless Chromium context with its own user-data-dir at ``profile``."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(chromium_path()),
            args=list(FLAGS),
            headless=True,
            viewport=viewport,
            accept_downloads=True,
        )
        try:
            yield context
        finally:
            await context.close()
