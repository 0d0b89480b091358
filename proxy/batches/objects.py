"""OpenAI's batch objects: the ``Batch`` a batch route answers, what one input line of a batch
file holds (``BatchRequestInput``), and the output and error files' lines
(``BatchRequestOutput``).

A batch's life: ``validating`` (created, its lines stored), ``in_progress`` (a process runs its
lines), ``finalizing`` (its output and error files are written), then ``completed``; or
``cancelling`` (asked to stop) then ``cancelled``, with the files of the lines that ran; or
``expired`` when its ``expires_at`` passed before all its lines ran (those that did not run are
``batch_expired`` lines of its error file); or ``failed`` when its input file is not a valid
batch file (``errors`` names each problem with its line; nothing runs). An ended batch's
``usage`` sums its lines' token usage (:mod:`proxy.batches.usage`).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import msgspec

Status = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
RUNNABLE: tuple[Status, ...] = ("validating", "in_progress", "finalizing", "cancelling")
"""The statuses of a batch a process still has to take to its end."""
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")
"""The endpoints an OpenAI batch's lines may call."""
MESSAGES = "/v1/messages"
"""The endpoint of an Anthropic message batch's lines (:mod:`proxy.batches.message_batches`)."""
COMPLETION_WINDOW = "24h"
DAY_SECONDS = 24 * 3600
WINDOW_SECONDS = DAY_SECONDS
ENCODER = msgspec.json.Encoder()


class RequestCounts(msgspec.Struct):
    """How many lines a batch has, and how many of them ran well or failed."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int = 0


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class BatchUsage(msgspec.Struct):
    """A batch's token usage (the ``usage`` of OpenAI's ``Batch``): its lines' usages summed."""

    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class BatchError(msgspec.Struct, omit_defaults=True):
    """One problem of a batch's input file: its ``line`` (from 1) when it has one."""

    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(msgspec.Struct):
    data: list[BatchError]
    object: str = "list"


class Batch(msgspec.Struct):
    """OpenAI's batch object (``Batch``); timestamps in epoch seconds."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: Status
    created_at: int
    expires_at: int
    request_counts: RequestCounts
    object: str = "batch"
    errors: BatchErrors | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    metadata: dict[str, str] | None = None
    usage: BatchUsage | None = None


BATCH_DECODER = msgspec.json.Decoder(Batch)


def new_batch_id(prefix: str = "batch_") -> str:
    """A fresh batch id, as OpenAI spells them (Anthropic's: ``msgbatch_``)."""
    return prefix + uuid.uuid4().hex


class InputLine(msgspec.Struct, forbid_unknown_fields=True):
    """One line of a batch input file (``BatchRequestInput``)."""

    custom_id: str
    method: str
    url: str
    body: dict[str, Any]


INPUT_DECODER = msgspec.json.Decoder(InputLine)


class LineResponse(msgspec.Struct):
    status_code: int
    request_id: str
    body: msgspec.Raw


class LineError(msgspec.Struct):
    code: str
    message: str


class OutputLine(msgspec.Struct):
    """One line of a batch's output or error file (``BatchRequestOutput``): the response the
    line's endpoint answered (its status and body, an error body too), and for a failed line
    its error's code and message."""

    id: str
    custom_id: str
    response: LineResponse | None
    error: LineError | None
