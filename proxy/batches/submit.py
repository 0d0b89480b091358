"""Reading a batch input file (JSONL of ``BatchRequestInput`` lines) into the lines a batch runs.

Every problem is collected as a :class:`~proxy.batches.objects.BatchError` naming its line (from
1), as OpenAI reports them on a ``failed`` batch: a line that is not a JSON object of
``custom_id``, ``method``, ``url`` and ``body`` (``invalid_json_line``), a ``method`` other than
``POST`` (``invalid_method``), a ``url`` other than the batch's endpoint (``mismatched_url``), a
``custom_id`` used twice (``duplicate_custom_id``); a file with no line, or with more than the
bound, is one error without a line (``empty_file``, ``too_many_lines``). Blank lines are skipped.
At most :data:`MAX_ERRORS` errors are kept.
"""

from __future__ import annotations

import msgspec

from proxy.batches.objects import ENCODER, INPUT_DECODER, BatchError

MAX_ERRORS = 100
MAX_CUSTOM_ID = 512


def read_lines(
    content: bytes, endpoint: str, max_lines: int
) -> tuple[list[tuple[str, bytes]], list[BatchError]]:
    """The ``(custom_id, request body)`` of each line of ``content``, and the problems found
    (module docstring); the lines mean nothing when there are problems."""
    lines: list[tuple[str, bytes]] = []
    errors: list[BatchError] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        if len(lines) >= max_lines:
            message = f"the file has more than {max_lines} requests, this gateway's bound"
            return [], [BatchError("too_many_lines", message)]
        try:
            line = INPUT_DECODER.decode(raw)
        except msgspec.DecodeError as exc:
            errors.append(
                BatchError("invalid_json_line", f"not a batch request: {exc}", None, number)
            )
            continue
        if line.method.upper() != "POST":
            errors.append(BatchError("invalid_method", "method must be POST", "method", number))
        if line.url != endpoint:
            message = f"url must be the batch's endpoint, {endpoint}"
            errors.append(BatchError("mismatched_url", message, "url", number))
        if not line.custom_id or len(line.custom_id) > MAX_CUSTOM_ID:
            message = f"custom_id must be 1 to {MAX_CUSTOM_ID} characters"
            errors.append(BatchError("invalid_custom_id", message, "custom_id", number))
        elif line.custom_id in seen:
            message = f"custom_id {line.custom_id[:80]!r} is used by an earlier line"
            errors.append(BatchError("duplicate_custom_id", message, "custom_id", number))
        seen.add(line.custom_id)
        lines.append((line.custom_id, ENCODER.encode(line.body)))
        if len(errors) >= MAX_ERRORS:
            break
    if not lines and not errors:
        errors.append(BatchError("empty_file", "the input file has no request"))
    return lines, errors[:MAX_ERRORS]
