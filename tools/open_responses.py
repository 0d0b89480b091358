"""Run the Open Responses compliance suite's HTTP checks against a gateway on the mock provider.

``make compliance`` (or ``.venv/bin/python tools/open_responses.py``) does, in order:

1. **The suite**, at :data:`SUITE_COMMIT`: a git checkout of :data:`SUITE_REPO` at
   ``--suite`` (default ``.openresponses/suite``, ignored by git). A missing directory is cloned
   from :data:`SUITE_REPO`; an existing checkout is moved to the pinned commit (fetched when it
   lacks it). A directory that is not a git checkout at that commit is refused, so a result always
   names the suite's code that produced it. The suite's code is never copied into this repository.
   ``--unpinned`` runs ``--suite`` as it is instead (say, files of the suite gathered without git):
   it only has to hold ``bin/compliance-test.ts``, and the run says that its result is not tied to
   :data:`SUITE_COMMIT`.
2. **Its dependencies**: what its HTTP checks import at run time, ``zod`` at the version the
   suite's ``bun.lock`` pins (with ``--unpinned`` and no ``bun.lock``: the exact version its
   ``package.json`` names), and :data:`TSX_VERSION` of ``tsx`` (the suite is written for bun;
   ``tsx`` runs the same TypeScript on node), installed with ``npm`` into
   ``.openresponses/node`` (ignored by git) and linked into the checkout as ``node_modules``.
3. **A gateway**: ``crossway serve`` on a free port of 127.0.0.1 with :data:`CONFIG` (the
   ``mock`` provider only, its data in a temporary directory), awaited on ``/health/ready``.
4. **The checks**: ``bin/compliance-test.ts --base-url … --model mock/tools``. ``mock/tools``
   answers text, calls the first tool it is offered, and answers a tool's result, which is every
   behaviour the checks ask of a model. Their output is shown as the suite prints it.
5. **Stop**: the gateway's process group is sent SIGTERM by its PID (SIGKILL after a grace).

Exit status: the suite's (0 only when no check failed), or 2 when a step before the checks
failed (git, npm or the gateway), with the reason on stderr. Steps 1 and 2 need the network
(GitHub and the npm registry) the first time, which is why this is not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUITE_REPO = "https://github.com/openresponses/openresponses.git"
SUITE_COMMIT = "18e565604fdf7a08ad3a06bbc30d1ddaee999ea4"
TSX_VERSION = "4.23.15"
MODEL = "mock/tools"
ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".openresponses"
CONFIG = """\
server: {access_log: false}
providers:
  mock: {type: mock}
"""
_READY_TIMEOUT_S = 30.0
_STOP_GRACE_S = 5.0


class StepFailed(RuntimeError):
    """A step before the checks failed; the message says which and why."""


def _run(command: list[str], cwd: Path | None = None) -> str:
    """Run ``command``, returning its stdout; :class:`StepFailed` with its stderr on failure."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StepFailed(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def checkout(suite: Path, commit: str) -> None:
    """Make ``suite`` a git checkout of :data:`SUITE_REPO` at ``commit``.

    Clones when ``suite`` does not exist, fetches when the checkout lacks ``commit``. Raises
    :class:`StepFailed` when git fails or ``suite`` exists but is not a git checkout.
    """
    if not suite.exists():
        suite.parent.mkdir(parents=True, exist_ok=True)
        _run(["git", "clone", "--quiet", SUITE_REPO, str(suite)])
    if not (suite / ".git").exists():
        raise StepFailed(f"{suite} is not a git checkout of {SUITE_REPO}")
    has_commit = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=suite, capture_output=True
    )
    if has_commit.returncode != 0:
        _run(["git", "fetch", "--quiet", "origin"], cwd=suite)
    _run(["git", "checkout", "--quiet", "--detach", commit], cwd=suite)


def accept_unpinned(suite: Path) -> None:
    """Accept ``suite`` as it is, for ``--unpinned``: it must hold ``bin/compliance-test.ts``.

    Raises :class:`StepFailed` otherwise. Prints that the result is not tied to the pinned commit.
    """
    if not (suite / "bin" / "compliance-test.ts").is_file():
        raise StepFailed(f"{suite} holds no bin/compliance-test.ts")
    print(
        f"compliance: {suite} is run as it is (--unpinned): "
        f"the result is not tied to the pinned commit {SUITE_COMMIT}",
        flush=True,
    )


def pinned_zod(suite: Path, *, unpinned: bool = False) -> str:
    """The zod version the suite's ``bun.lock`` pins; :class:`StepFailed` when it names none.

    With ``unpinned`` and no ``bun.lock``, the exact version the suite's ``package.json`` names
    among its dependencies (a range is refused: the run must name the zod it used).
    """
    if unpinned and not (suite / "bun.lock").exists():
        return _package_json_zod(suite)
    if not (suite / "bun.lock").is_file():
        raise StepFailed(f"{suite} has no bun.lock")
    lock = (suite / "bun.lock").read_text()
    found = re.search(r'"zod@(\d+\.\d+\.\d+)"', lock)
    if found is None:
        raise StepFailed(f"{suite / 'bun.lock'} pins no zod version")
    return found.group(1)


def _package_json_zod(suite: Path) -> str:
    try:
        package = json.loads((suite / "package.json").read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{suite} has no bun.lock and no readable package.json: {error}") from None
    version = str(package.get("dependencies", {}).get("zod", ""))
    if re.fullmatch(r"\d+\.\d+\.\d+", version) is None:
        raise StepFailed(f"{suite / 'package.json'} names no exact zod version (found {version!r})")
    return version


def install(suite: Path, node_dir: Path, *, unpinned: bool = False) -> None:
    """Install the checks' run-time dependencies into ``node_dir`` and link them into ``suite``.

    Raises :class:`StepFailed` when npm fails or ``suite/node_modules`` is something else.
    """
    node_dir.mkdir(parents=True, exist_ok=True)
    wanted = [f"zod@{pinned_zod(suite, unpinned=unpinned)}", f"tsx@{TSX_VERSION}"]
    stamp = node_dir / ".installed"
    if not stamp.exists() or stamp.read_text() != " ".join(wanted):
        (node_dir / "package.json").write_text('{"private": true}\n')
        _run(["npm", "install", "--no-audit", "--no-fund", "--save-exact", *wanted], cwd=node_dir)
        stamp.write_text(" ".join(wanted))
    link = suite / "node_modules"
    if link.is_symlink() and link.resolve() == (node_dir / "node_modules").resolve():
        return
    if link.exists() or link.is_symlink():
        raise StepFailed(f"{link} exists and is not a link to {node_dir / 'node_modules'}")
    link.symlink_to(node_dir / "node_modules")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def gateway() -> Iterator[str]:
    """A ``crossway serve`` on :data:`CONFIG`, yielding its base URL; stopped by PID on exit.

    Raises :class:`StepFailed` (with the end of the gateway's log) when it does not become ready.
    """
    with tempfile.TemporaryDirectory(prefix="crossway-compliance-") as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(CONFIG)
        log_path = Path(tmp) / "gateway.log"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [sys.executable, "-m", "proxy", "serve", "--config", str(config)]
        env = {**os.environ, "CROSSWAY_DATA_DIR": tmp}
        with log_path.open("wb") as log:
            child = subprocess.Popen(
                [*serve, "--host", "127.0.0.1", "--port", str(port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _await_ready(child, url, log_path)
            yield url
        finally:
            _stop(child)


def _await_ready(child: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/health/ready", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    raise StepFailed(f"the gateway did not become ready on {url}:\n{tail}")


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the gateway's process group (its PID leads it), SIGKILL after a grace."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=_STOP_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def run_checks(suite: Path, node_dir: Path, base_url: str, extra: list[str], label: str) -> int:
    """Run the suite's ``bin/compliance-test.ts`` against ``base_url``; its exit status."""
    tsx = node_dir / "node_modules" / ".bin" / "tsx"
    command = [str(tsx), "bin/compliance-test.ts", "--base-url", f"{base_url}/v1"]
    command += ["--api-key", "crossway-compliance", "--model", MODEL, *extra]
    print(f"open responses suite {label} against {base_url}", flush=True)
    return subprocess.run(command, cwd=suite, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=WORK / "suite", help="the suite's checkout")
    parser.add_argument("--commit", default=SUITE_COMMIT, help="the suite's commit to run")
    parser.add_argument(
        "--unpinned",
        action="store_true",
        help="run --suite as it is (no git): the result is not tied to the pinned commit",
    )
    parser.add_argument("extra", nargs="*", help="passed to the suite (after --), e.g. -v")
    args = parser.parse_args(argv)
    suite = args.suite.resolve()
    node_dir = WORK / "node"
    try:
        if args.unpinned:
            accept_unpinned(suite)
            label = f"at {suite} (unpinned)"
        else:
            checkout(suite, args.commit)
            label = args.commit[:12]
        install(suite, node_dir, unpinned=args.unpinned)
        with gateway() as url:
            return run_checks(suite, node_dir, url, args.extra, label)
    except StepFailed as failure:
        print(f"compliance: {failure}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
