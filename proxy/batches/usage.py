"""A batch's ``usage``: the token usages of its output lines summed.

Each line of a batch's output file (``BatchRequestOutput``) carries its endpoint's answer, whose
``usage`` is spelled as that endpoint spells it: chat completions and embeddings
(``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``) or responses (``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``). :class:`UsageTally` reads either into OpenAI's
batch ``usage`` (:class:`~proxy.batches.objects.BatchUsage`); a line without a usage, or whose
usage is not one of those shapes, adds nothing. A line's ``total_tokens`` is its own when it
gives one, else its input plus its output. :class:`WireUsage` is that reading of one usage
object; the native batches read their answers' usage with it too (as canonical usage).
"""

from __future__ import annotations

import msgspec

from proxy.batches.objects import BatchUsage
from proxy.core.canonical import Usage


class _Details(msgspec.Struct):
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


class WireUsage(msgspec.Struct):
    """One OpenAI usage object, in any of its endpoints' spellings (module docstring)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _Details | None = None
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None

    @property
    def taken(self) -> int:
        """Input tokens, cached ones included."""
        return _first(self.input_tokens, self.prompt_tokens)

    @property
    def given(self) -> int:
        """Output tokens, reasoning ones included."""
        return _first(self.output_tokens, self.completion_tokens)

    @property
    def cached(self) -> int:
        """Input tokens read from the provider's cache."""
        details = self.input_tokens_details or self.prompt_tokens_details
        return 0 if details is None else details.cached_tokens or 0

    @property
    def reasoning(self) -> int:
        """Output tokens spent reasoning."""
        details = self.output_tokens_details or self.completion_tokens_details
        return 0 if details is None else details.reasoning_tokens or 0

    def canonical(self) -> Usage:
        """As the gateway's disjoint buckets (cached apart from input, reasoning from output)."""
        cached, reasoning = self.cached, self.reasoning
        return Usage(
            input=max(self.taken - cached, 0),
            cache_read=cached,
            output=max(self.given - reasoning, 0),
            reasoning=reasoning,
        )


class _Body(msgspec.Struct):
    usage: WireUsage | None = None


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
        taken, given = found.taken, found.given
        usage = self.usage
        usage.input_tokens += taken
        usage.output_tokens += given
        usage.total_tokens += taken + given if found.total_tokens is None else found.total_tokens
        usage.input_tokens_details.cached_tokens += found.cached
        usage.output_tokens_details.reasoning_tokens += found.reasoning


def _first(*values: int | None) -> int:
    return next((value for value in values if value is not None), 0)
