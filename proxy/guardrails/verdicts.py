"""What a check says about some texts (:class:`Finding`), what that becomes under the check's
configuration (:data:`Verdict`), and the error a block is (:class:`GuardrailBlocked`).

A :class:`Finding` never holds the matched text: ``reason`` is the check's own words (a webhook's
``reason``, a moderation category), kept for the log line, never for the client.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from msgspec import Struct

from proxy.core.errors import ErrorKind, GatewayError
from proxy.guardrails.config import OnError, Phase

Verdict = Literal["allow", "block", "warn", "modify", "retry", "error_allow", "error_block"]
"""A check's verdict on one phase of one request, as counted and recorded in the ledger:
``error_allow`` / ``error_block`` are a check that failed (timeout, bad answer) and what its
``on_error`` made of that."""


class Finding(Struct, frozen=True):
    """What one check found: ``flagged`` (the texts break the policy), ``replacement`` (a
    webhook's modified texts, one per text it was given), ``failed`` (the check could not decide:
    ``reason`` says why, in words that quote nothing of the texts)."""

    flagged: bool = False
    replacement: list[str] | None = None
    failed: bool = False
    reason: str | None = None


CLEAN = Finding()


def failure_verdict(on_error: OnError) -> Verdict:
    """The verdict of a check that failed, under its ``on_error``."""
    return "error_allow" if on_error == "allow" else "error_block"


class GuardrailBlocked(GatewayError):
    """A guardrail refused the request or its answer (400 ``content_policy_violation``).

    The message names the check and the phase, never what it matched; ``check`` is the name.
    A block on input made no upstream call (``attempts`` 0).
    """

    status = 400
    type = "invalid_request_error"
    default_code = "content_policy_violation"
    kind: ClassVar[ErrorKind] = "content_policy"

    def __init__(self, check: str, phase: Phase) -> None:
        what = "request" if phase == "input" else "answer"
        super().__init__(f"the {what} was blocked by the guardrail {check!r}")
        self.check = check
        self.phase = phase
        if phase == "input":
            self.attempts = 0  # nothing was sent upstream: the request costs nothing
