"""A batch's ``usage``: the token usages of its output lines summed.

Each line of a batch's output file (``BatchRequestOutput``) carries its endpoint's answer, whose
``usage`` is spelled as that endpoint spells it: chat completions and embeddings
(``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``) or responses (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``). :class:`UsageTally` reads either into OpenAI's
batch ``usage`` (:class:`~proxy.batches.objects.BatchUsage`); a line without a usage, or whose
usage is not one of those shapes, adds nothing. A line's ``total_tokens`` is its own when it
gives one, else its input plus its output.
"""

from __future__ import annotations

import msgspec

from proxy.batches.objects import BatchUsage


class _Details(msgspec.Struct):
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _Details | None = None
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None


class _Body(msgspec.Struct):
    usage: _Usage | None = None


class _Response(msgspec.Struct):
    body: _Body | None = None


class _Line(msgspec.Struct):
    response: _Response | None = None


_LINE = msgspec.json.Decoder(_Line)


class UsageTally:
    """Sums the usages of output lines (module docstring); :attr:`usage` is the sum so far."""

    def __init__(self) -> None:
        self.usage = BatchUsage()

    def add(self, line: bytes) -> None:
        """Add the usage of one output line (nothing when it has none it can read)."""
        try:
            response = _LINE.decode(line).response
        except msgspec.DecodeError:
            return
        found = None if response is None or response.body is None else response.body.usage
        if found is None:
            return
        taken = _first(found.input_tokens, found.prompt_tokens)
        given = _first(found.output_tokens, found.completion_tokens)
        usage = self.usage
        usage.input_tokens += taken
        usage.output_tokens += given
        usage.total_tokens += taken + given if found.total_tokens is None else found.total_tokens
        cached = found.input_tokens_details or found.prompt_tokens_details
        if cached is not None:
            usage.input_tokens_details.cached_tokens += cached.cached_tokens or 0
        reasoning = found.output_tokens_details or found.completion_tokens_details
        if reasoning is not None:
            usage.output_tokens_details.reasoning_tokens += reasoning.reasoning_tokens or 0


def _first(*values: int | None) -> int:
    return next((value for value in values if value is not None), 0)
