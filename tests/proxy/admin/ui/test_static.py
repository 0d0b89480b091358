"""The UI's static files: served from the package with strict security headers."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from aiohttp import ClientSession

from proxy.admin.ui import CONTENT_SECURITY_POLICY, STATIC, load_assets
from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.installer import uv
from tests.proxy.admin.test_admin_api import write_config

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
async def ui(tmp_path: Path):
    runner, url = await start_site(create_app(write_config(tmp_path), log_stream=io.StringIO()))
    async with ClientSession() as session:
        yield session, url
    await runner.cleanup()


async def test_every_file_is_served_with_the_security_headers(ui):
    session, url = ui
    for name, asset in load_assets().items():
        async with session.get(f"{url}/ui/{name}") as response:
            assert response.status == 200, name
            assert await response.read() == asset.body
            headers = response.headers
            assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
            assert headers["X-Frame-Options"] == "DENY"
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Referrer-Policy"] == "no-referrer"
            assert headers["Content-Type"] == asset.content_type
        async with session.get(f"{url}/ui/{name}", headers={"If-None-Match": asset.etag}) as r:
            assert r.status == 304


async def test_ui_redirects_to_the_index_and_unknown_files_are_404(ui):
    session, url = ui
    async with session.get(f"{url}/ui", allow_redirects=False) as response:
        assert response.status == 308
        assert response.headers["Location"] == "/ui/"
    async with session.get(f"{url}/ui/") as response:
        assert response.status == 200
        assert "<title>Crossway admin</title>" in await response.text()
    async with session.get(f"{url}/ui/nope.js") as response:
        assert response.status == 404
        assert response.headers["X-Frame-Options"] == "DENY"
    for path in ("/ui/../pyproject.toml", "/ui/%2e%2e/proxy/app.py", "/ui/js/../../app.py"):
        async with session.get(url + path) as response:
            assert response.status == 404, path
            assert "import" not in await response.text()


def test_the_csp_allows_nothing_inline_or_foreign():
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_the_markup_has_no_inline_script_style_or_handler():
    for path in STATIC.rglob("*.html"):
        html = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), path
        assert "<style" not in html
        assert not re.search(r"\sstyle=", html)
        assert not re.search(r"\son[a-z]+=", html)


def test_the_index_preloads_every_module():
    html = (STATIC / "index.html").read_text()
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', html))
    modules = {p.relative_to(STATIC).as_posix() for p in (STATIC / "js").rglob("*.js")}
    assert preloaded == modules - {"js/app.js"}


def test_the_scripts_never_parse_html_strings():
    for path in (STATIC / "js").rglob("*.js"):
        source = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in source, f"{path.name} uses {sink}"


def test_the_wheel_carries_the_static_files(tmp_path: Path):
    source = tmp_path / "source"  # built from a copy: the checkout gets no build/ directory
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("proxy", "plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run(
        [uv(), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path), str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("crossway-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in load_assets():
        assert f"proxy/admin/ui/static/{name}" in names, name
