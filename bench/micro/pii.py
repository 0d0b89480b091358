"""``python -m bench.micro pii [--repeat N]``: the PII masking pieces, measured in-process.

Measures, in this process, with every built-in entity enabled:

- scanning a 1 KB prompt with no PII (prose with numbers, dates and a version) — target 20 µs;
- masking a 100 KB conversation (100 turns of about 1 KB, a few values in some) — target 2 ms;
- pathological 100 KB inputs (runs of ``@``, digits, colons, separators, long tokens, PEM
  headers …), each at 50 KB and 100 KB: twice the input, about twice the time, is linear;
- what restoring adds to a stream without placeholders, per chunk: a decoded chunk through the
  chunk rewriter, and a run of verbatim frames through the rewriting stream — target 2 µs.

Each figure is the median of ``--repeat`` timed runs (and the best one) of this process's CPU
time, so time spent waiting for a core on a loaded machine is not counted; the report says
which targets are met. The plugin's CPU per request against the empty chain is measured by
``python -m bench.micro plugins --plugins masking`` (in-process) and by the HTTP benchmark
(``python -m bench --targets passthrough,gateway,gateway-masking``; its config is in
``bench/targets.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence

from proxy.core.canonical import Message
from proxy.core.reply import Chunk, ChunkChoice, Delta, RawFrames
from proxy.pii.detectors import BUILTIN_FINDERS
from proxy.pii.request import Rule, mask_messages
from proxy.pii.restore import Rewriter
from proxy.pii.scanner import Scanner
from proxy.pii.secrets import find_secrets
from proxy.pii.stream import ChunkRewriter, RewritingStream
from proxy.pii.vault import Replacer, Vault

SCANNER = Scanner([("secret", find_secrets), *BUILTIN_FINDERS.items()])
RULES = {entity: Rule("mask", entity.upper()) for entity in (*BUILTIN_FINDERS, "secret")}
PROSE = (
    "Please summarise the attached quarterly report for the board. Revenue grew 12% to $4.2 "
    "million in Q3 2024, driven by the new subscription tier launched on 15 March. Churn fell "
    "from 3.1% to 2.4%. The team shipped version 2.10 of the mobile app and closed 148 support "
    "tickets. Next steps: hire two engineers, renegotiate the hosting contract, and review "
    "pricing before the November release. "
)
PROMPT_1KB = (PROSE * 4)[:1024]
VALUES = ("jane.doe@example.com", "+44 20 7946 0958", "4111 1111 1111 1111", "10.20.30.40")
PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    "@ runs": lambda n: "@" * n,
    "a@ pairs": lambda n: "a@" * (n // 2),
    "digits": lambda n: "1" * n,
    "digit groups": lambda n: "1 " * (n // 2),
    "dotted digits": lambda n: "1." * (n // 2),
    "colons": lambda n: "a:" * (n // 2),
    "local parts": lambda n: ("x" * 63 + ".") * (n // 64),
    "long token": lambda n: "key=" + "A1b2" * (n // 4),
    "PEM headers": lambda n: "-----BEGIN PRIVATE KEY-----" * (n // 27),
    "uppercase+digits": lambda n: "AB12 " * (n // 5),
}


def timed(work: Callable[[], object], repeat: int, inner: int) -> tuple[float, float]:
    """(median, best) CPU seconds per call of ``work`` over ``repeat`` runs of ``inner`` calls."""
    samples = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(inner):
            work()
        samples.append((time.process_time() - started) / inner)
    return statistics.median(samples), min(samples)


def conversation() -> list[Message]:
    turns = []
    for index in range(100):
        text = PROSE * 3
        if index % 10 == 0:
            text += f" Contact {VALUES[index // 10 % len(VALUES)]} for details."
        turns.append(Message(role="user" if index % 2 else "assistant", content=text[:1024]))
    return turns


def chunk(text: str) -> Chunk:
    return Chunk(id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))])


def frames(count: int) -> RawFrames:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    lines = []
    for index in range(count):
        body["choices"] = [{"index": 0, "delta": {"content": f" word{index}"}}]
        lines.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    return RawFrames(b"".join(lines), lambda payload: chunk("x"))


class _Batches:
    """A batched stream that hands out the same batch forever."""

    ended = False

    def __init__(self, batch: list[Chunk | RawFrames]) -> None:
        self._batch = batch

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        return self._batch


def stream_figures(repeat: int) -> tuple[tuple[float, float], tuple[float, float], int]:
    vault = Vault()
    vault.placeholder("EMAIL", VALUES[0])
    rewriter = ChunkRewriter(Rewriter(vault))
    plain = chunk(" and the answer continues")
    decoded = timed(lambda: rewriter.chunk(plain), repeat, 20_000)
    per_batch = 20
    stream = RewritingStream(_Batches([frames(per_batch)]), ChunkRewriter(Rewriter(vault)))  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    try:
        raw = timed(lambda: loop.run_until_complete(stream.next_batch(True)), repeat, 2_000)
    finally:
        loop.close()
    return decoded, raw, per_batch


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print every figure; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro pii", description=__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per figure (median)")
    repeat = parser.parse_args(argv).repeat
    rows: list[tuple[str, float, float, str, bool | None]] = []
    scan = timed(lambda: SCANNER.scan(PROMPT_1KB), repeat, 2_000)
    rows.append(("scan 1 KB prompt, no PII", *scan, "20 us", scan[0] <= 20e-6))
    turns = conversation()
    size = sum(len(t.content or "") for t in turns)  # type: ignore[arg-type]

    def mask() -> object:
        return mask_messages(turns, SCANNER, RULES, {"user", "assistant"}, Replacer())

    masked = timed(mask, repeat, 10)
    rows.append((f"mask {size // 1024} KB conversation", *masked, "2 ms", masked[0] <= 2e-3))
    decoded, raw, per_batch = stream_figures(repeat)
    rows.append(("restore: decoded chunk, no placeholder", *decoded, "2 us", decoded[0] <= 2e-6))
    per_frame = (raw[0] / per_batch, raw[1] / per_batch)
    rows.append(
        ("restore: verbatim frame, no placeholder", *per_frame, "2 us", per_frame[0] <= 2e-6)
    )
    for name, make in PATHOLOGICAL.items():
        half, whole = make(51_200), make(102_400)
        at_50 = timed(lambda text=half: SCANNER.scan(text), repeat, 1)
        at_100 = timed(lambda text=whole: SCANNER.scan(text), repeat, 1)
        ratio = at_100[0] / at_50[0] if at_50[0] else 0.0
        rows.append((f"pathological {name}: 100 KB ({ratio:.1f}x 50 KB)", *at_100, "linear", None))
    print(f"{'figure':<58} {'median':>10} {'best':>10}  target")
    for name, median, best, target, met in rows:
        mark = "" if met is None else ("  ok" if met else "  MISSED")
        print(f"{name:<58} {_us(median):>10} {_us(best):>10}  {target}{mark}")
    return 0 if all(met is not False for *_, met in rows) else 1


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"
