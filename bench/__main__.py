"""``python -m bench``: run the Crossway benchmark matrix and print the report.

Progress goes to stderr, the report to stdout. Exit status: 0 when no check failed,
1 when a check failed, 2 on bad arguments or a server that could not be started,
130 when interrupted (Ctrl-C or SIGTERM).
"""

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from bench.harness import Options, run_benchmark
from bench.matrix import DEFAULT_TARGETS, DRIVERS, STANDARD_EXTRAS, TARGETS, Settings
from bench.processes import HarnessError
from bench.report import format_text, write_json
from bench.targets import DEFAULT_GATEWAY_CMD

_MODES = {"non-stream": False, "stream": True}
_FULL_CONCURRENCIES = (1, 64, 256)
_FULL_LATENCIES_MS = (0, 50)
_FULL_DURATION_S = 5.0
_QUICK_CONCURRENCIES = (1, 64)
_QUICK_LATENCIES_MS = (0,)
_QUICK_DURATION_S = 2.0
_REQUEST_TIMEOUT_S = 30.0


def _names(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """Argument type: a non-empty comma-separated subset of ``allowed``."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items or any(item not in allowed for item in items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {allowed}")
        return items

    return parse


def _ints(minimum: int) -> Callable[[str], tuple[int, ...]]:
    """Argument type: a non-empty comma-separated list of integers >= ``minimum``."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(item) for item in text.split(",") if item.strip())
        except ValueError as exc:
            raise argparse.ArgumentTypeError("expected comma-separated integers") from exc
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {minimum}")
        return values

    return parse


def _positive_int(text: str) -> int:
    """Argument type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("expected an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError("expected an integer >= 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the Crossway gateway against a minimal passthrough and a "
        "mock OpenAI upstream, all on 127.0.0.1.",
    )
    parser.add_argument(
        "--targets",
        type=_names(TARGETS),
        help="comma-separated targets to measure besides the direct baseline "
        "(default: passthrough,gateway, plus gateway-default at 50 ms and 256 connections; "
        "gateway-default adds the gateway with the shipped config's plugin chain and access "
        "log, gateway-cost the gateway with the cost plugin, gateway-masking the gateway with "
        "the masking plugin on every built-in entity, gateway-auth auth and limits, "
        "gateway-keyed auth alone and gateway-budget auth and cost for a key with budgets, "
        "gateway-gov the governance chain, gateway-gov-redis the same on a private "
        "redis-server, gateway-traced the empty chain with tracing on; see bench/README.md "
        "for what each variant's checks compare)",
    )
    parser.add_argument(
        "--modes",
        type=_names(tuple(_MODES)),
        default=tuple(_MODES),
        help="comma-separated modes (default: non-stream,stream)",
    )
    parser.add_argument(
        "--concurrency",
        type=_ints(1),
        help="comma-separated concurrency levels (default: 1,64,256; --quick: 1,64)",
    )
    parser.add_argument(
        "--latency-ms",
        type=_ints(0),
        help="comma-separated upstream latencies in ms (default: 0,50; --quick: 0)",
    )
    parser.add_argument(
        "--duration", type=float, help="measured seconds per cell (default: 5; --quick: 2)"
    )
    parser.add_argument(
        "--warmup", type=float, default=0.5, help="unmeasured warm-up seconds per cell"
    )
    parser.add_argument(
        "--max-requests", type=int, default=200_000, help="request cap per cell and phase"
    )
    parser.add_argument(
        "--rounds",
        type=_positive_int,
        default=3,
        help="interleaved rounds per cell: each target's cell is measured in this many "
        "slices, alternating with the other targets' (default: 3)",
    )
    parser.add_argument(
        "--driver",
        choices=DRIVERS,
        default="aiohttp",
        help="the load driver: aiohttp's client (the default, the one the targets were set "
        "with) or raw, the bench's own HTTP/1.1 connections, a quarter to a third of its CPU "
        "per request (see bench/README.md)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="concurrency 1 and 64, 0 ms upstream, 2 s per cell"
    )
    parser.add_argument(
        "--gateway-cmd",
        default=DEFAULT_GATEWAY_CMD,
        help="command starting the gateway; {python}, {config} and {port} are substituted "
        f"(default: {DEFAULT_GATEWAY_CMD!r})",
    )
    parser.add_argument(
        "--conversation-bytes",
        type=int,
        default=0,
        help="earlier turns of ordinary text before the prompt, up to about this many bytes "
        "of conversation (default: 0, the prompt alone)",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    return parser


def _options(args: argparse.Namespace) -> Options:
    quick: bool = args.quick
    duration = args.duration or (_QUICK_DURATION_S if quick else _FULL_DURATION_S)
    concurrencies = args.concurrency or (_QUICK_CONCURRENCIES if quick else _FULL_CONCURRENCIES)
    latencies = args.latency_ms or (_QUICK_LATENCIES_MS if quick else _FULL_LATENCIES_MS)
    targets = DEFAULT_TARGETS if args.targets is None else args.targets
    return Options(
        targets=tuple(target for target in TARGETS if target in targets),
        modes=tuple(_MODES[mode] for mode in args.modes),
        latencies_ms=latencies,
        concurrencies=concurrencies,
        settings=Settings(
            duration_s=duration,
            warmup_s=args.warmup,
            max_requests=args.max_requests,
            request_timeout_s=_REQUEST_TIMEOUT_S,
            rounds=args.rounds,
            driver=args.driver,
            conversation_bytes=args.conversation_bytes,
        ),
        gateway_command=args.gateway_cmd,
        extras=STANDARD_EXTRAS if args.targets is None else (),
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM into ``KeyboardInterrupt`` so cleanup runs as on Ctrl-C."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the benchmark, print the report; return the exit status."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        report = run_benchmark(
            _options(args), lambda line: print(line, file=sys.stderr, flush=True)
        )
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; servers stopped", file=sys.stderr)
        return 130
    print(format_text(report))
    if args.json is not None:
        write_json(report, args.json)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
