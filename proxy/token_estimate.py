"""An estimate of a call's input tokens, for ``count_tokens`` when the provider cannot count.

Tokenizers differ by model and vendor, and most providers offer no counting endpoint, so the
gateway estimates with the rule of thumb both OpenAI and Anthropic document — about four
characters of text per token — applied to UTF-8 bytes (so non-Latin text, which tokenizes
denser, is not undercounted):

- every text the model reads: system and message text parts, tool-call names and arguments,
  tool results, and each offered tool's name, description and JSON schema (as compact JSON) —
  ``ceil(bytes / 4)`` over all of it;
- plus 4 tokens per message (role and framing);
- plus 1,600 per image: the most Anthropic's vision guide says one image costs (about 1.15
  megapixels), whatever its URL or data;
- a file part counts as the text of its data (an upper bound: base64 is denser in characters
  than the document's tokens).

It is pure and deterministic; it never under-reports by much for ordinary prose and may
over-report for code, JSON or files. The exact count comes from the provider where it has one.
"""

from __future__ import annotations

import msgspec

from proxy.canonical import Call, FilePart, ImagePart, Message, TextPart

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
        text_bytes += len(function.name.encode())
        if function.description:
            text_bytes += len(function.description.encode())
        if function.parameters:
            text_bytes += len(_ENCODER.encode(function.parameters))
    return tokens + -(-text_bytes // CHARS_PER_TOKEN)


def _content(message: Message) -> tuple[int, int]:
    """UTF-8 bytes of a message's text (tool calls included) and its number of images."""
    size = 0
    images = 0
    content = message.content
    if isinstance(content, str):
        size += len(content.encode())
    elif content:
        for part in content:
            if isinstance(part, TextPart):
                size += len(part.text.encode())
            elif isinstance(part, ImagePart):
                images += 1
            elif isinstance(part, FilePart):
                size += len(_ENCODER.encode(part.file))
    for call in message.tool_calls or ():
        size += len(call.function.name.encode()) + len(call.function.arguments.encode())
    return size, images
