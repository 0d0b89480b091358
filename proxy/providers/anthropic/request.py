"""The request side of the Anthropic provider: canonical call → Messages API request body.

:class:`Request` (``POST /v1/messages``) and :class:`CountRequest`
(``POST /v1/messages/count_tokens``) are the wire bodies. :mod:`proxy.providers.anthropic.provider`
fills them: the model, ``max_tokens``, ``thinking``, ``metadata`` and the passed-through fields
are its own (see its docstring); everything else comes from the translations here.

- :func:`conversation` (``messages``): ``system`` and ``developer`` messages, wherever they
  appear, are lifted in order into the top-level ``system`` (one text block each). ``tool``
  messages become ``tool_result`` blocks of a user turn. Consecutive turns of the same role are
  merged (the API wants alternation), and in a merged user turn the ``tool_result`` blocks come
  first, as the API requires.
- Parts: text → ``text`` (empty text is dropped: the API rejects it); ``image_url`` → ``image``
  with a ``base64`` source for ``data:`` URLs or a ``url`` source for http(s) URLs; a ``file``
  part carrying a PDF ``data:`` URL → ``document``; a refusal → ``text``.
- Assistant ``tool_calls`` → ``tool_use`` blocks. Assistant ``reasoning_content`` is not sent
  back: the API would need its signature.
- :func:`tools` → ``{name, description, input_schema}`` (no parameters: an empty object
  schema); :func:`tool_choice`: ``auto`` / ``required`` / ``none`` /
  ``{"type": "function", ...}`` → ``auto`` / ``any`` / ``none`` / ``tool``;
  ``parallel_tool_calls: false`` → ``disable_parallel_tool_use``.
- :func:`stop_sequences`: ``stop`` (a string or a list) → ``stop_sequences``;
  :func:`number_or_unset`: ``temperature`` and ``top_p`` as given (null: not sent);
  :func:`output_config`: ``response_format`` ``json_schema`` → ``output_config.format`` (other
  formats send nothing).

Input the API cannot take is a :class:`~proxy.core.errors.BadRequest` whose ``param`` names it: a
role other than ``system``, ``developer``, ``user``, ``assistant`` and ``tool``
(``messages[i].role``); audio, an image that is neither an http(s) URL nor a base64 ``data:``
URL, a file that is not a PDF ``data:`` URL in ``file_data``, a ``data:`` URL not of the form
``data:<media type>;base64,<data>`` (``messages[i].content[j]``); tool-call arguments that are
not a JSON object (``messages[i].tool_calls[j].function.arguments``); a tool message without
``tool_call_id`` (``messages[i].tool_call_id``); a ``tool_choice`` object that names no
function (``tool_choice``); a ``json_schema`` response format without a schema
(``response_format.json_schema``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from proxy.core.canonical import (
    AudioPart,
    Call,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    TextPart,
)
from proxy.core.errors import BadRequest
from proxy.providers.base import merge_into_turn

# --- wire request ------------------------------------------------------------------------------


class _Source(Struct, omit_defaults=True):
    type: str
    media_type: str | UnsetType = UNSET
    data: str | UnsetType = UNSET
    url: str | UnsetType = UNSET


class _TextBlock(Struct, tag="text", tag_field="type"):
    text: str


class _ImageBlock(Struct, tag="image", tag_field="type"):
    source: _Source


class _DocumentBlock(Struct, tag="document", tag_field="type"):
    source: _Source


class _ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: Raw


class _ToolResultBlock(Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[_TextBlock | _ImageBlock | _DocumentBlock] | UnsetType = UNSET


_Block = _TextBlock | _ImageBlock | _DocumentBlock | _ToolUseBlock | _ToolResultBlock


class _Turn(Struct):
    role: str
    content: list[_Block]


class _ToolSpec(Struct, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | UnsetType = UNSET


class _ToolChoice(Struct, omit_defaults=True):
    type: str
    name: str | UnsetType = UNSET
    disable_parallel_tool_use: bool | UnsetType = UNSET


class Thinking(Struct):
    type: str
    budget_tokens: int


class Metadata(Struct):
    user_id: str


class _OutputFormat(Struct):
    type: str
    schema: dict[str, Any]


class _OutputConfig(Struct):
    format: _OutputFormat


class Request(Struct, omit_defaults=True):
    model: str
    max_tokens: int
    messages: list[_Turn]
    system: list[_TextBlock] | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    tools: list[_ToolSpec] | UnsetType = UNSET
    tool_choice: _ToolChoice | UnsetType = UNSET
    thinking: Thinking | UnsetType = UNSET
    metadata: Metadata | UnsetType = UNSET
    output_config: _OutputConfig | UnsetType = UNSET
    stream: bool = False


class CountRequest(Struct, omit_defaults=True):
    model: str
    messages: list[_Turn]
    system: list[_TextBlock] | UnsetType = UNSET
    tools: list[_ToolSpec] | UnsetType = UNSET
    tool_choice: _ToolChoice | UnsetType = UNSET
    thinking: Thinking | UnsetType = UNSET


# --- translation -------------------------------------------------------------------------------

_OBJECT_DECODER = msgspec.json.Decoder(dict[str, Any])


def conversation(messages: list[Message]) -> tuple[list[_TextBlock], list[_Turn]]:
    """The ``system`` blocks and the alternating turns for ``messages`` (see module docstring)."""
    system: list[_TextBlock] = []
    turns: list[_Turn] = []
    for position, message in enumerate(messages):
        role = message.role
        if role in ("system", "developer"):
            text = message.text()
            if text:
                system.append(_TextBlock(text=text))
            continue
        if role == "tool":
            blocks: list[_Block] = [_tool_result(message, position)]
            role = "user"
        elif role == "user":
            blocks = _blocks(message.content, position)
        elif role == "assistant":
            blocks = _blocks(message.content, position)
            blocks += _tool_uses(message, position)
        else:
            raise BadRequest(
                f"messages[{position}]: role {role!r} is not supported by the anthropic provider;"
                " use tool messages",
                param=f"messages[{position}].role",
            )
        if not blocks:
            continue
        if turns and turns[-1].role == role:
            merge_into_turn(turns[-1].content, blocks, _is_tool_result)
        else:
            turns.append(_Turn(role=role, content=blocks))
    return system, turns


def _is_tool_result(block: _Block) -> bool:
    return isinstance(block, _ToolResultBlock)


def _blocks(content: str | list[ContentPart] | None, position: int) -> list[_Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_TextBlock(text=content)] if content else []
    blocks: list[_Block] = []
    for index, part in enumerate(content):
        where = f"messages[{position}].content[{index}]"
        if isinstance(part, TextPart):
            if part.text:
                blocks.append(_TextBlock(text=part.text))
        elif isinstance(part, RefusalPart):
            blocks.append(_TextBlock(text=part.refusal))
        elif isinstance(part, ImagePart):
            blocks.append(_ImageBlock(source=_image_source(part.image_url.url, where)))
        elif isinstance(part, FilePart):
            blocks.append(_DocumentBlock(source=_file_source(part.file, where)))
        elif isinstance(part, AudioPart):
            raise BadRequest("the anthropic provider does not accept audio input", param=where)
    return blocks


def _image_source(url: str, where: str) -> _Source:
    if url.startswith("data:"):
        media_type, data = _data_url(url, where)
        return _Source(type="base64", media_type=media_type, data=data)
    if url.startswith(("http://", "https://")):
        return _Source(type="url", url=url)
    raise BadRequest("an image must be an http(s) URL or a base64 data: URL", param=where)


def _file_source(file: dict[str, Any], where: str) -> _Source:
    data_url = file.get("file_data")
    if isinstance(data_url, str) and data_url.startswith("data:"):
        media_type, data = _data_url(data_url, where)
        if media_type == "application/pdf":
            return _Source(type="base64", media_type=media_type, data=data)
    raise BadRequest(
        "the anthropic provider accepts files only as PDF data: URLs in file_data", param=where
    )


def _data_url(url: str, where: str) -> tuple[str, str]:
    """``(media_type, base64 data)`` of a ``data:<type>;base64,<data>`` URL."""
    header, comma, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not comma or encoding != "base64" or not media_type:
        raise BadRequest("a data: URL must be data:<media type>;base64,<data>", param=where)
    return media_type, data


def _tool_uses(message: Message, position: int) -> list[_Block]:
    if not message.tool_calls:
        return []
    blocks: list[_Block] = []
    for index, tool_call in enumerate(message.tool_calls):
        arguments = tool_call.function.arguments.strip() or "{}"
        try:
            _OBJECT_DECODER.decode(arguments)
        except msgspec.DecodeError:
            raise BadRequest(
                "tool call arguments must be a JSON object",
                param=f"messages[{position}].tool_calls[{index}].function.arguments",
            ) from None
        blocks.append(
            _ToolUseBlock(id=tool_call.id, name=tool_call.function.name, input=Raw(arguments))
        )
    return blocks


def _tool_result(message: Message, position: int) -> _ToolResultBlock:
    if not message.tool_call_id:
        raise BadRequest(
            "a tool message needs tool_call_id", param=f"messages[{position}].tool_call_id"
        )
    content: str | list[Any] | UnsetType = UNSET
    if isinstance(message.content, str):
        content = message.content or UNSET
    elif message.content:
        content = _blocks(message.content, position) or UNSET
    return _ToolResultBlock(tool_use_id=message.tool_call_id, content=content)


def tools(call: Call) -> list[_ToolSpec] | UnsetType:
    tools = call.params.tools
    if not tools:
        return UNSET
    return [
        _ToolSpec(
            name=tool.function.name,
            description=tool.function.description,
            input_schema=tool.function.parameters or {"type": "object", "properties": {}},
        )
        for tool in tools
    ]


def tool_choice(
    choice: str | dict[str, Any] | UnsetType | None, parallel: bool | UnsetType | None
) -> _ToolChoice | UnsetType:
    serial: bool | UnsetType = True if parallel is False else UNSET
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise BadRequest("tool_choice must name a function", param="tool_choice")
        return _ToolChoice(type="tool", name=name, disable_parallel_tool_use=serial)
    if choice == "none":
        return _ToolChoice(type="none")
    if choice == "required":
        return _ToolChoice(type="any", disable_parallel_tool_use=serial)
    if choice == "auto" or serial is True:
        return _ToolChoice(type="auto", disable_parallel_tool_use=serial)
    return UNSET


def output_config(response_format: dict[str, Any] | UnsetType | None) -> _OutputConfig | UnsetType:
    """``json_schema`` structured output → ``output_config.format``; other formats: nothing."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return UNSET
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise BadRequest(
            "response_format json_schema needs a schema", param="response_format.json_schema"
        )
    return _OutputConfig(format=_OutputFormat(type="json_schema", schema=schema))


def stop_sequences(stop: str | list[str] | UnsetType | None) -> list[str] | UnsetType:
    if isinstance(stop, str):
        return [stop]
    return list(stop) if stop else UNSET


def number_or_unset(value: float | UnsetType | None) -> float | UnsetType:
    return UNSET if value is None else value
