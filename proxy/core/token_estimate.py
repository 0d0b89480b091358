"""Token estimates, for when no tokenizer or provider count is at hand.

:func:`estimate_input_tokens` answers ``count_tokens`` when the provider cannot count, and is
the prompt of a call's worst case (:func:`expected_tokens`), which budgets, ``tpm`` limits and
cost-aware routing size a call by; the cheaper :func:`estimate_prompt_tokens` (message text
only) prices a reply that came without usage, and :func:`estimate_tokens` charges a stream that
ended without usage for the text it carried.

Tokenizers differ by model and vendor, and most providers offer no counting endpoint, so the
gateway estimates with the rule of thumb both OpenAI and Anthropic document — about four
characters of text per token. The count_tokens estimate applies it to UTF-8 bytes (so
non-Latin text, which tokenizes denser, is not undercounted):

- every text the model reads: system and message text parts, tool-call names and arguments,
  tool results, and each offered tool's name, description and JSON schema (as compact JSON) —
  ``ceil(bytes / 4)`` over all of it;
- plus 4 tokens per message (role and framing);
- plus 1,600 per image: the most Anthropic's vision guide says one image costs (about 1.15
  megapixels), whatever its URL or data;
- a file part counts as the text of its data (an upper bound: base64 is denser in characters
  than the document's tokens); audio parts are not counted.

A call's output is bounded by its limit per answer — ``max_completion_tokens`` (what the
Responses API's ``max_output_tokens`` decodes to) or ``max_tokens`` (Anthropic's, and the legacy
completions'), the larger when both are set — times the answers it asks for, ``n`` (1 when
unset; Anthropic Messages, Responses and Fabro requests have no ``n``): :func:`output_limit`.

Every estimate is pure and deterministic; it never under-reports by much for ordinary prose
and may over-report for code, JSON or files. The exact count comes from the provider where it
has one.
"""

from __future__ import annotations

import msgspec

from proxy.core.canonical import Call, FilePart, ImagePart, Message, TextPart

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_IMAGE = 1600

_ENCODER = msgspec.json.Encoder()


def estimate_input_tokens(call: Call) -> int:
    """The estimated input tokens of ``call`` (see the module docstring)."""
    text_bytes = 0
    tokens = 0
    for message in call.messages:
        tokens += TOKENS_PER_MESSAGE
        content_bytes, images = _content(message)
        text_bytes += content_bytes
        tokens += images * TOKENS_PER_IMAGE
    for tool in call.params.tools or ():
        function = tool.function
        text_bytes += _utf8_size(function.name)
        if function.description:
            text_bytes += _utf8_size(function.description)
        if function.parameters:
            text_bytes += len(_ENCODER.encode(function.parameters))
    return tokens + -(-text_bytes // CHARS_PER_TOKEN)


def _content(message: Message) -> tuple[int, int]:
    """UTF-8 bytes of a message's text (tool calls included) and its number of images."""
    size = 0
    images = 0
    content = message.content
    if isinstance(content, str):
        size += _utf8_size(content)
    elif content:
        for part in content:
            if isinstance(part, TextPart):
                size += _utf8_size(part.text)
            elif isinstance(part, ImagePart):
                images += 1
            elif isinstance(part, FilePart):
                size += len(_ENCODER.encode(part.file))
    for call in message.tool_calls or ():
        size += _utf8_size(call.function.name) + _utf8_size(call.function.arguments)
    return size, images


def _utf8_size(text: str) -> int:
    """The UTF-8 bytes of ``text``, without encoding it when it is ASCII (which CPython knows
    without reading it)."""
    return len(text) if text.isascii() else len(text.encode())


def estimate_tokens(characters: int) -> int:
    """Tokens in ``characters`` characters of text: one per four, rounded up."""
    return -(-characters // CHARS_PER_TOKEN)


def estimate_prompt_tokens(call: Call) -> int:
    """The prompt tokens of ``call``: its messages' text (one token per four characters) plus
    four per message. Images, audio and tool definitions are not counted. For an embeddings
    call, its inputs' (:meth:`~proxy.core.canonical.EmbeddingRequest.estimated_tokens`); for a
    media call, its text's (:attr:`~proxy.core.canonical.MediaRequest.tokens`)."""
    if call.embedding is not None:
        return call.embedding.estimated_tokens()
    if call.media is not None:
        return call.media.tokens
    messages = call.messages
    characters = 0
    for message in messages:
        content = message.content
        # Message.text(), without its call for the common string content
        characters += len(content) if type(content) is str else len(message.text())
        for tool_call in message.tool_calls or ():
            characters += len(tool_call.function.arguments) + len(tool_call.function.name)
    return -(-characters // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)


def answers(call: Call) -> int:
    """How many answers ``call`` asks for: its ``n``, else 1."""
    n = call.params.n
    return n if isinstance(n, int) else 1


def output_limit(call: Call) -> int | None:
    """The most output tokens ``call`` can be answered with by an upstream that honours its
    limits: the limit per answer (the larger of ``max_completion_tokens`` and ``max_tokens``
    when both are set) times :func:`answers`; 0 for an embeddings call; None when it set no
    limit (the upstream's own default applies)."""
    if call.embedding is not None:
        return 0
    params = call.params
    limit = params.max_completion_tokens
    other = params.max_tokens
    if not isinstance(limit, int) or (isinstance(other, int) and other > limit):
        limit = other
    if not isinstance(limit, int):
        return None
    return limit * answers(call)


def expected_tokens(call: Call, default_output: int) -> tuple[int, int]:
    """The worst-case token mix of ``call``: its estimated input
    (:func:`estimate_input_tokens`; an embeddings call's inputs) and its :func:`output_limit`,
    or ``default_output`` per answer when it set no limit. A media call: its text's tokens
    (:attr:`~proxy.core.canonical.MediaRequest.tokens`) and no output."""
    if call.embedding is not None:
        return call.embedding.estimated_tokens(), 0
    if call.media is not None:
        return call.media.tokens, 0
    output = output_limit(call)
    if output is None:
        output = default_output * answers(call)
    return estimate_input_tokens(call), output
