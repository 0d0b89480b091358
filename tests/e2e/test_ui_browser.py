"""The admin UI in a real browser (headless Chromium driven by Playwright) against the gateway
on 127.0.0.1, with the openai SDK as the client whose key the UI mints and revokes.

Screenshots of every page go to the test's tmp folder (``screenshots/``; its path is printed).
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from playwright.async_api import ConsoleMessage, Dialog, Page, expect

from proxy.server.app import create_app
from tests.e2e.browser import PHONE, browser
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI

MASTER = "master-key-" + "fedcba9876543210" * 2
XSS = "<img src=x onerror=alert(1)>"
PROMPT = "a prompt the request log must never show 7c1f"


class Site:
    def __init__(self, url: str, logs: io.StringIO, shots: Path) -> None:
        self.url = url
        self.logs = logs
        self.shots = shots

    def openai(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


@pytest.fixture
async def site(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Site]:
    _, upstream_url = upstream
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: true}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            auth:
              master_key: "{MASTER}"
              cache_ttl: 0
              teams:
                search: {{budget: {{max_usd: 100, period: 1mo}}}}
            providers:
              up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
            models:
              chat: [{{target: up/gpt-test, prices: {{input: 10, output: 20}}}}]
            plugins:
              - auth: {{}}
              - limits: {{}}
              - cost: {{}}
              - balance: {{}}
            """
        )
    )
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    shots = tmp_path / "screenshots"
    shots.mkdir()
    print(f"\nUI screenshots: {shots}")
    yield Site(url, logs, shots)
    await runner.cleanup()


def watch(page: Page) -> list[str]:
    """Collect what must never happen: CSP violations, script errors, alert() dialogs (the
    browser's note of a refused wrong key, a 401, is expected)."""
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "status of 401" not in message.text:
            problems.append(f"console: {message.text}")

    async def on_dialog(dialog: Dialog) -> None:
        problems.append(f"dialog: {dialog.message}")
        await dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"pageerror: {error}"))
    page.on("dialog", on_dialog)
    return problems


async def sign_in(page: Page, site: Site, key: str = MASTER) -> None:
    await page.get_by_label("Master key").fill(key)
    await page.get_by_role("button", name="Sign in").click()


async def test_signed_out_only_the_sign_in_form_is_reachable(site: Site, tmp_path: Path) -> None:
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        problems = watch(page)
        await page.goto(f"{site.url}/ui/#/keys")
        await expect(page.get_by_label("Master key")).to_be_visible()
        await expect(page.get_by_role("navigation")).to_be_hidden()
        await expect(page.locator("#page")).to_be_hidden()
        assert await page.locator("#page").inner_html() == ""
        await sign_in(page, site, "not-the-master-key")
        await expect(page.get_by_role("alert")).to_contain_text("not the master key")
        await expect(page.get_by_role("navigation")).to_be_hidden()
        await page.screenshot(path=site.shots / "sign-in.png")
        await sign_in(page, site)
        await expect(page.get_by_role("heading", name="Keys", exact=True)).to_be_visible()
        assert await page.evaluate("document.cookie") == ""
        assert MASTER not in page.url
        assert await page.evaluate("sessionStorage.getItem('crossway.masterKey')") == MASTER
        await page.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_label("Master key")).to_be_visible()
        assert await page.evaluate("sessionStorage.length") == 0
        assert await page.locator("#page").inner_html() == ""
        assert not problems, problems
    assert MASTER not in site.logs.getvalue()


async def test_a_key_from_mint_to_revocation_in_the_browser(site: Site, tmp_path: Path) -> None:
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        problems = watch(page)
        await page.goto(f"{site.url}/ui/")
        await sign_in(page, site)
        await expect(page.locator("#card-requests")).to_have_text("0")
        await page.screenshot(path=site.shots / "overview-empty.png")

        # Mint a key whose alias is markup: the plaintext is shown once, with a copy button.
        await page.get_by_role("link", name="Keys").click()
        await page.get_by_role("button", name="Create key").click()
        dialog = page.get_by_role("dialog", name="Create key")
        await dialog.get_by_label("Alias").fill(XSS)
        await dialog.get_by_label("Team").select_option("search")
        await dialog.get_by_label("Requests per minute").fill("100")
        await dialog.get_by_role("button", name="Create").click()
        shown = page.get_by_role("dialog", name=re.compile("Key created"))
        await expect(shown.get_by_text("shown this once")).to_be_visible()
        await expect(shown.get_by_role("button", name="Copy")).to_be_visible()
        key = await shown.get_by_label("The new key").input_value()
        assert key.startswith("sk-cw-")
        await page.screenshot(path=site.shots / "key-created.png")
        await shown.get_by_role("button", name="I have copied it").click()
        await expect(shown).to_have_count(0)
        assert key not in await page.content()  # the plaintext is gone from the page

        # The alias is text, not markup; no image was made, no script ran.
        row = page.locator("tbody tr", has_text="active").first
        await expect(row.locator("td.alias")).to_have_text(XSS)
        assert await page.locator("#page img").count() == 0

        # The key works with the openai SDK; the request shows in the log, spend moves.
        client = site.openai(key)
        reply = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": PROMPT}]
        )
        assert reply.choices[0].message.content
        await page.get_by_role("link", name="Request log").click()
        log_row = page.locator("tbody tr[data-request-id]").first
        await expect(log_row).to_contain_text(XSS)
        await expect(log_row).to_contain_text("chat")
        await expect(log_row).to_contain_text("200")
        await log_row.get_by_role("button").click()
        details = page.locator("tr.detail").first
        await expect(details).to_be_visible()
        await expect(details).to_contain_text("upstream_model")
        assert PROMPT not in await page.content()
        await page.screenshot(path=site.shots / "request-log.png", full_page=True)

        await page.get_by_role("link", name="Spend").click()
        await expect(page.locator("#spend-summary")).to_contain_text("1 requests")
        team_row = page.locator("#spend-totals tbody tr", has_text="search")
        await expect(team_row).to_contain_text("$0.")
        await page.screenshot(path=site.shots / "spend.png", full_page=True)
        async with page.expect_download() as caught:
            await page.get_by_role("button", name="Export CSV").click()
        download = await caught.value
        text = await asyncio.to_thread(Path(await download.path()).read_text)
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [row["team"] for row in rows] == ["search"]
        assert rows[0]["requests"] == "1"
        assert float(rows[0]["cost_usd"]) > 0
        await page.get_by_label("Group by").select_option("key")  # the chart per day, keys apart
        by_key = page.locator("#spend-totals tbody tr")
        await expect(by_key.locator("th")).to_have_text(re.compile(r"^key_[0-9a-f]{16}$"))
        await expect(page.locator("#spend-summary")).to_contain_text("1 requests")

        await page.get_by_role("link", name="Keys").click()
        key_row = page.locator("tbody tr", has_text=XSS)
        await expect(key_row).to_contain_text("$0.")  # spent so far
        await expect(key_row).not_to_contain_text("never")  # last used
        await page.screenshot(path=site.shots / "keys.png", full_page=True)

        # Block, unblock, then revoke with a confirmation: the SDK is refused with 401.
        await key_row.get_by_role("button", name=re.compile("^Block")).click()
        await expect(key_row).to_contain_text("blocked")
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}]
            )
        await key_row.get_by_role("button", name=re.compile("^Unblock")).click()
        await expect(key_row).to_contain_text("active")
        await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}]
        )
        await key_row.get_by_role("button", name=re.compile("^Revoke")).click()
        confirm = page.get_by_role("dialog", name="Revoke key")
        await expect(confirm).to_contain_text("cannot be undone")
        await confirm.get_by_role("button", name="Revoke").click()
        await expect(page.locator("tbody tr", has_text=XSS)).to_have_count(0)
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}]
            )
        assert refused.value.status_code == 401

        # The overview refreshes on its own: a request made while it is open shows up.
        await page.get_by_role("link", name="Overview").click()
        requests = page.locator("#card-requests")
        await expect(requests).to_have_text(re.compile(r"^[1-9]\d*$"))
        before = int(await requests.inner_text())
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}]
            )
        await expect(requests).to_have_text(str(before + 1), timeout=20_000)
        await expect(page.locator("#card-limited")).to_have_text("0 / 0")
        await page.screenshot(path=site.shots / "overview.png", full_page=True)
        for name, heading in (("Teams", "Teams"), ("Models", "Models")):
            await page.get_by_role("link", name=name).click()
            await expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
            await expect(page.locator("tbody tr").first).to_be_visible()
            await page.screenshot(path=site.shots / f"{name.lower()}.png", full_page=True)
        aliases = page.get_by_role("table", name=re.compile("Aliases"))
        await expect(aliases).to_contain_text("up/gpt-test")
        await expect(aliases).to_contain_text("healthy")
        assert not problems, problems
    logs = site.logs.getvalue()
    assert MASTER not in logs
    assert key not in logs


async def test_keyboard_and_phone(site: Site, tmp_path: Path) -> None:
    async with browser(tmp_path / "profile", viewport=PHONE) as context:
        page = await context.new_page()
        problems = watch(page)
        await page.goto(f"{site.url}/ui/")
        await expect(page.get_by_label("Master key")).to_be_focused()
        await page.keyboard.type(MASTER)
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        await expect(page.locator("#main")).to_be_focused()  # signing in ends there
        # Tab reaches the navigation; Enter on a link opens its page.
        for _ in range(20):
            await page.keyboard.press("Tab")
            if await page.evaluate("document.activeElement.textContent") == "Keys":
                break
        else:
            pytest.fail("Tab never reached the Keys link")
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("heading", name="Keys", exact=True)).to_be_visible()
        await page.get_by_role("button", name="Create key").focus()
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("dialog", name="Create key")).to_be_visible()
        await page.keyboard.press("Escape")
        await expect(page.get_by_role("dialog")).to_have_count(0)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the page scrolls sideways on a phone"
        await page.screenshot(path=site.shots / "keys-phone.png", full_page=True)
        assert not problems, problems


# Counts the page's GET /admin/overview calls, and those whose body is still unread: a render
# goes on (its refresh timer set) in the same task that reads its body.
_COUNT_OVERVIEW = """
window.overviewCalls = { made: 0, pending: 0 };
const realFetch = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const counted = String(input).endsWith("/admin/overview");
  if (counted) { window.overviewCalls.made += 1; window.overviewCalls.pending += 1; }
  const response = await realFetch(input, init);
  if (counted) {
    const text = response.text.bind(response);
    response.text = async () => {
      try { return await text(); } finally { window.overviewCalls.pending -= 1; }
    };
  }
  return response;
};
"""


async def _overview_calls(page: Page, made: int) -> None:
    """Wait until the page has made ``made`` overview calls and read every answer; fail if it
    made more."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        calls = await page.evaluate("window.overviewCalls")
        assert calls["made"] <= made, f"{calls['made']} overview calls, {made} expected"
        if calls == {"made": made, "pending": 0}:
            return
        assert asyncio.get_running_loop().time() < deadline, f"waiting for {made}: {calls}"
        await asyncio.sleep(0.02)


async def test_each_route_renders_once_and_no_refresh_outlives_its_page(
    site: Site, tmp_path: Path
) -> None:
    """Signing in renders the overview once; when two routes overlap, the page that finished
    loading after the other began stops its refresh: one call per refresh period, whatever the
    order the renders end in (timers on Playwright's clock, moved by the test)."""
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        problems = watch(page)
        await page.add_init_script(_COUNT_OVERVIEW)
        await page.clock.install()
        await page.goto(f"{site.url}/ui/")
        await sign_in(page, site)
        await expect(page.locator("#main")).to_be_focused()
        await _overview_calls(page, 1)  # one render, not one per hash change and one more
        await page.clock.run_for(5_000)  # a refresh period
        await _overview_calls(page, 2)
        await page.evaluate("() => { location.hash = '#/keys'; location.hash = '#/overview'; }")
        await _overview_calls(page, 4)  # two renders of the overview at once
        for made in (5, 6):  # then one refresh a period: the earlier render's was stopped
            await page.clock.run_for(5_000)
            await _overview_calls(page, made)
        assert not problems, problems
