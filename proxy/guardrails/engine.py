"""Running a request's checks: the input before the call goes on, the answer after, and what
each finding becomes under its check's ``action``.

:meth:`Guardrails.guard` is the whole of it for one request and a list of checks (already chosen:
see the ``guardrails`` plugin). Checks run one after another in the order given, each phase's
texts read again after a webhook modified them:

- **input** — each check of ``on: input`` / ``both`` reads the call's texts
  (:func:`~proxy.guardrails.texts.input_texts`). A ``block`` finding raises
  :class:`~proxy.guardrails.verdicts.GuardrailBlocked` with ``attempts`` 0: nothing was sent
  upstream, so the request costs nothing. ``warn`` lets it through. A webhook's ``modify``
  replaces the texts in the call before it goes on.
- **output, whole** — the same on the answer's texts; ``json_schema`` with ``action: retry``
  asks the upstream once more (the same call) when the answer does not validate, and blocks if
  the second answer does not either; a ``modify`` replaces the answer's texts.
- **output, streamed** — see :mod:`proxy.guardrails.stream`: checks with a ``finder`` run in
  windows as the text streams; the others hold the stream (``stream: hold``, the default: read
  whole first, then the same as a whole answer, retry included) or run at its end
  (``stream: end``: no retry, and a ``modify`` cannot be applied, so it blocks). Embeddings
  and media answers (audio, images, a media stream's bytes) have no output phase.

A check that fails (a webhook's timeout, a moderation endpoint's error, a garbage answer) is
decided by its ``on_error`` (``allow`` or ``block``; checks without one fail closed).

Accounting: each check's verdict on each phase (:data:`~proxy.guardrails.verdicts.Verdict`) is
counted in ``crossway_guardrail_checks_total{check, phase, verdict}``, its time observed in
``crossway_guardrail_check_duration_seconds{check, phase}`` (window checks on a stream are not
timed: they run in pieces as the text passes), appended to the request's ledger record
(``Accounting.guardrails``: ``{check, phase, verdict}``), and every request with a verdict other
than ``allow`` logs one ``guardrail_verdicts`` line listing them — never a text, never a match,
never a service's reason. Warned checks known before the answer's headers leave are named in
``x-crossway-guardrails: warned=<names>``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from proxy.cache.assemble import assemble
from proxy.cache.replay import replay_chunks
from proxy.core.canonical import Call
from proxy.core.errors import UpstreamError
from proxy.core.headers import GUARDRAILS_HEADER
from proxy.core.metrics import Metrics
from proxy.core.plugin import Next
from proxy.core.reply import Chunk, Reply, Response
from proxy.guardrails.checks import Check
from proxy.guardrails.config import Phase
from proxy.guardrails.stream import EndCheck, GuardedStream, HeldStream, WindowWatch
from proxy.guardrails.texts import TextSet, input_texts, output_texts, replace_input, replace_output
from proxy.guardrails.verdicts import Finding, GuardrailBlocked, Verdict, failure_verdict


class Guardrails:
    """The checks of one config, run for requests (see the module docstring). ``window``:
    characters of streamed text held back for the window checks; ``logger`` takes the
    ``guardrail_verdicts`` lines."""

    def __init__(self, metrics: Metrics, logger: Any, window: int) -> None:
        self._counts = metrics.guardrail_checks
        self._durations = metrics.guardrail_duration
        self.logger = logger
        self.window = window
        self._counters: dict[tuple[str, str, str], Any] = {}  # the series' children, by labels
        self._timers: dict[tuple[str, str], Any] = {}

    async def guard(self, call: Call, checks: Sequence[Check], next: Next) -> Reply:
        """Run ``checks`` on ``call`` and its answer; raises
        :class:`~proxy.guardrails.verdicts.GuardrailBlocked` for a block, else what ``next``
        raises."""
        run = _Run(self, call)
        inputs = [check for check in checks if check.config.on != "output"]
        outputs = [check for check in checks if check.config.on != "input"]
        try:
            if inputs:
                await run.input(inputs)
        except GuardrailBlocked:
            run.report()
            raise
        if not outputs or call.embedding is not None or call.media is not None:
            reply = await next(call)
            run.report()
            return run.headed(reply)
        try:
            reply = await run.output(outputs, next)
        except BaseException:
            run.report()
            raise
        if type(reply.stream) is not GuardedStream:
            run.report()
        return run.headed(reply)

    def count(self, check: str, phase: Phase, verdict: Verdict, seconds: float | None) -> None:
        """Count one verdict (and time it, when timed)."""
        key = (check, phase, verdict)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self._counts(check, phase, verdict)
        counter.inc()
        if seconds is not None:
            timer = self._timers.get(key[:2])
            if timer is None:
                timer = self._timers[check, phase] = self._durations(check, phase)
            timer.observe(seconds)


class _Run:
    """One request's checks: its verdicts so far, and what was warned."""

    __slots__ = ("_call", "_guardrails", "_reported", "_verdicts", "_warned")

    def __init__(self, guardrails: Guardrails, call: Call) -> None:
        self._guardrails = guardrails
        self._call = call
        self._verdicts: list[dict[str, str]] = []
        self._warned: list[str] = []
        self._reported = False

    # -- input ------------------------------------------------------------------------------

    async def input(self, checks: Sequence[Check]) -> None:
        call = self._call
        texts = input_texts(call)
        for check in checks:
            timed = await self._inspect(check, texts, "input")
            if timed.replacement is not None:
                self._verdict(check, "input", "modify", timed.seconds)
                replace_input(call, texts, timed.replacement)
                texts = input_texts(call)
                continue
            self._decide(check, "input", timed, retry=False)

    # -- output -----------------------------------------------------------------------------

    async def output(self, checks: Sequence[Check], next: Next) -> Reply:
        call = self._call
        reply = await next(call)
        windowed = [check for check in checks if check.finder is not None]
        whole = [check for check in checks if check.finder is None]
        if reply.response is not None:
            return await self._whole(reply, checks, next, retried=False)
        if reply.stream is None:
            return reply
        held = [check for check in whole if check.config.stream == "hold"]
        if held:
            return await self._held(reply, windowed, whole, next, retried=False)
        return self._streamed(reply, windowed, whole)

    async def _whole(
        self, reply: Reply, checks: Sequence[Check], next: Next, *, retried: bool
    ) -> Reply:
        response = reply.response
        assert response is not None
        checked = await self._response(response, checks, retried=retried)
        if checked is None:  # retry: ask once more
            again = await next(self._call)
            again.attempts += reply.attempts
            if again.response is None:
                await _close(again)
                raise GuardrailBlocked(_retried(checks), "output")
            return await self._whole(again, checks, next, retried=True)
        if checked is not response:
            reply.response = checked
        return reply

    async def _response(
        self, response: Response, checks: Sequence[Check], *, retried: bool
    ) -> Response | None:
        """``response`` checked (a modified copy, or itself); None when a check asks for a
        retry; raises for a block."""
        texts = output_texts(response)
        for check in checks:
            timed = await self._inspect(check, texts, "output")
            if timed.replacement is not None:
                self._verdict(check, "output", "modify", timed.seconds)
                response = replace_output(response, texts, timed.replacement)
                texts = output_texts(response)
                continue
            if not self._decide(check, "output", timed, retry=not retried):
                return None
        return response

    async def _held(
        self,
        reply: Reply,
        windowed: Sequence[Check],
        whole: Sequence[Check],
        next: Next,
        *,
        retried: bool,
    ) -> Reply:
        """Read the stream whole (window checks included), then check it as a whole answer."""
        stream = self._guarded(reply, windowed, None, report=False)
        chunks: list[Chunk] = []
        try:
            async for chunk in stream:
                chunks.append(chunk)
        finally:
            await stream.aclose()
        response = assemble(chunks, usage_required=False)
        if response is None:  # the upstream stream ended early: nothing whole to check
            raise UpstreamError(
                "the upstream stream ended before the answer was complete",
                upstream_status=502,
                provider=reply.provider,
            )
        checked = await self._response(response, whole, retried=retried)
        if checked is None:
            again = await next(self._call)
            again.attempts += reply.attempts
            if again.stream is None:
                await _close(again)
                raise GuardrailBlocked(_retried(whole), "output")
            return await self._held(again, windowed, whole, next, retried=True)
        reply.stream = HeldStream(chunks if checked is response else replay_chunks(checked))
        return reply

    def _streamed(self, reply: Reply, windowed: Sequence[Check], at_end: Sequence[Check]) -> Reply:
        """Wrap the stream: window checks as it passes, the others at its end."""

        async def end(chunks: list[Chunk]) -> None:
            response = assemble(chunks, usage_required=False)
            if response is None:
                return
            texts = output_texts(response)
            for check in at_end:
                timed = await self._inspect(check, texts, "output")
                if timed.replacement is not None:  # too late to change what was sent
                    self._verdict(check, "output", "block", timed.seconds)
                    raise GuardrailBlocked(check.name, "output")
                self._decide(check, "output", timed, retry=False)

        reply.stream = self._guarded(reply, windowed, end if at_end else None, report=True)
        return reply

    def _guarded(
        self, reply: Reply, windowed: Sequence[Check], at_end: EndCheck | None, *, report: bool
    ) -> GuardedStream:
        """``reply``'s stream through the window checks (and ``at_end``); ``report``: log the
        verdicts once it is over (else the caller does)."""
        assert reply.stream is not None
        found: dict[str, bool] = {}
        actions = {check.name: check.config.action for check in windowed}

        def on_found(name: str) -> None:
            if found.get(name):
                return
            found[name] = True
            if actions[name] == "block":
                raise GuardrailBlocked(name, "output")

        def on_over(ended: bool) -> None:
            for check in windowed:
                name = check.name
                if name in found:
                    verdict: Verdict = "block" if actions[name] == "block" else "warn"
                elif ended:
                    verdict = "allow"
                else:
                    continue  # the stream failed before this check saw all of it
                self._verdict(check, "output", verdict, None)
            if report:
                self.report()

        watch = None
        if windowed:
            finders = [(check.name, check.finder) for check in windowed if check.finder]
            watch = WindowWatch(finders, self._guardrails.window, on_found)
        return GuardedStream(reply.stream, watch, at_end, on_over)

    # -- verdicts ---------------------------------------------------------------------------

    async def _inspect(self, check: Check, texts: TextSet, phase: Phase) -> _Timed:
        started = time.perf_counter()
        finding = await check.inspect(texts, self._call, phase)
        return _Timed(finding, time.perf_counter() - started)

    def _decide(self, check: Check, phase: Phase, timed: _Timed, *, retry: bool) -> bool:
        """Record the verdict of ``timed``; raise for a block; False when a retry is due."""
        finding = timed.finding
        if finding.failed:
            verdict = failure_verdict(getattr(check.config, "on_error", "block"))
            self._verdict(check, phase, verdict, timed.seconds)
            if verdict == "error_block":
                raise GuardrailBlocked(check.name, phase)
            return True
        if not finding.flagged:
            self._verdict(check, phase, "allow", timed.seconds)
            return True
        action = check.config.action
        if action == "warn":
            self._verdict(check, phase, "warn", timed.seconds)
            if check.name not in self._warned:
                self._warned.append(check.name)
            return True
        if action == "retry" and retry:
            self._verdict(check, phase, "retry", timed.seconds)
            return False
        self._verdict(check, phase, "block", timed.seconds)
        raise GuardrailBlocked(check.name, phase)

    def _verdict(self, check: Check, phase: Phase, verdict: Verdict, seconds: float | None) -> None:
        self._guardrails.count(check.name, phase, verdict, seconds)
        entry = {"check": check.name, "phase": phase, "verdict": verdict}
        self._verdicts.append(entry)
        accounting = self._call.accounting
        if accounting.guardrails is None:
            accounting.guardrails = []
        accounting.guardrails.append(entry)
        if verdict == "warn" and check.name not in self._warned:
            self._warned.append(check.name)

    def headed(self, reply: Reply) -> Reply:
        """``reply`` with the warned checks named in its headers."""
        if self._warned:
            reply.headers[GUARDRAILS_HEADER] = "warned=" + ",".join(self._warned)
        return reply

    def report(self) -> None:
        """Log the verdicts once, when one is not ``allow`` (the ledger record has them as they
        were made)."""
        if self._reported:
            return
        self._reported = True
        verdicts = self._verdicts
        if any(verdict["verdict"] != "allow" for verdict in verdicts):
            self._guardrails.logger.info(
                "guardrail_verdicts", request_id=self._call.request_id, verdicts=verdicts
            )


class _Timed(msgspec.Struct, frozen=True):
    """A check's finding, and the seconds it took."""

    finding: Finding
    seconds: float

    @property
    def replacement(self) -> list[str] | None:
        """The finding's replacement texts (a webhook's modify), if any."""
        return self.finding.replacement


def _retried(checks: Sequence[Check]) -> str:
    """The name of the retrying check (for a block after a retry changed the answer's kind)."""
    for check in checks:
        if check.config.action == "retry":
            return check.name
    return checks[0].name


async def _close(reply: Reply) -> None:
    if reply.stream is not None:
        await reply.stream.aclose()
