"""Responses API input items into canonical messages: the item and content-part shapes as msgspec
decodes them (:class:`Item`), and :func:`conversation`, which turns a list of items into the
call's messages (see :mod:`proxy.dialects.responses.decode` for what each item becomes). Raises
:class:`~proxy.core.errors.BadRequest` naming the offending item's path.
"""

from __future__ import annotations

from typing import Any, Literal, TypeGuard

from msgspec import UNSET, Struct

from proxy.core.canonical import (
    ContentPart,
    FilePart,
    FunctionCall,
    ImagePart,
    ImageURL,
    Message,
    TextPart,
    ToolCall,
)
from proxy.dialects.base import invalid


class _InputText(Struct, tag="input_text", tag_field="type"):
    text: str


class _OutputText(Struct, tag="output_text", tag_field="type"):
    text: str


class _Refusal(Struct, tag="refusal", tag_field="type"):
    refusal: str


class _InputImage(Struct, tag="input_image", tag_field="type"):
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class _InputFile(Struct, tag="input_file", tag_field="type"):
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


class _ReasoningText(Struct, tag="reasoning_text", tag_field="type"):
    text: str


class _SummaryText(Struct, tag="summary_text", tag_field="type"):
    text: str


_Part = _InputText | _OutputText | _Refusal | _InputImage | _InputFile | _ReasoningText


class Item(Struct):
    """Any input item: which fields matter depends on ``type`` (a message may omit it)."""

    type: str = "message"
    role: str | None = None
    content: str | list[_Part] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[_Part] | None = None
    summary: list[_SummaryText] | None = None


_ROLES = frozenset({"user", "system", "developer", "assistant"})
_MessageRole = Literal["user", "system", "developer", "assistant"]


def _is_message_role(role: str | None) -> TypeGuard[_MessageRole]:
    """Whether ``role`` is one a message item may have (one of :data:`_ROLES`)."""
    return role in _ROLES


def conversation(items: list[Item]) -> list[Message]:
    """Canonical messages for input items (see the module docstring)."""
    messages: list[Message] = []
    for index, item in enumerate(items):
        path = f"input[{index}]"
        kind = item.type
        if kind == "message":
            _message(item, path, messages)
        elif kind == "function_call":
            _function_call(item, path, messages)
        elif kind == "function_call_output":
            messages.append(_function_output(item, path))
        elif kind == "reasoning":
            _reasoning(item, messages)
        elif kind == "item_reference":
            raise invalid(
                "item references are not supported by the gateway: send the items, or "
                "previous_response_id",
                f"{path}.type",
            )
        else:
            raise invalid(
                f"input item {kind!r} is not supported by the gateway (only messages, "
                "function calls and their outputs, and reasoning)",
                f"{path}.type",
            )
    return messages


def _open_assistant(messages: list[Message]) -> Message | None:
    """The last message if it is an assistant turn still being assembled from items."""
    if messages and messages[-1].role == "assistant":
        return messages[-1]
    return None


def _message(item: Item, path: str, messages: list[Message]) -> None:
    role = item.role
    if not _is_message_role(role):
        raise invalid("expected one of 'user', 'system', 'developer', 'assistant'", f"{path}.role")
    content = item.content
    if content is None:
        raise invalid("a message needs content", f"{path}.content")
    if role == "assistant":
        _assistant_message(content, path, messages)
        return
    if isinstance(content, str):
        messages.append(Message(role=role, content=content))
        return
    parts = [_part(part, f"{path}.content[{i}]") for i, part in enumerate(content)]
    messages.append(Message(role=role, content=parts))


def _assistant_message(content: Any, path: str, messages: list[Message]) -> None:
    texts: list[str] = []
    refusals: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    else:
        for i, part in enumerate(content):
            if isinstance(part, (_OutputText, _InputText)):
                texts.append(part.text)
            elif isinstance(part, _Refusal):
                refusals.append(part.refusal)
            else:
                raise invalid(
                    "an assistant message carries output_text and refusal parts only",
                    f"{path}.content[{i}].type",
                )
    open_turn = _open_assistant(messages)
    if open_turn is not None and open_turn.content is None and not open_turn.tool_calls:
        target = open_turn  # the text of a turn whose reasoning came first
    else:
        target = Message(role="assistant")
        messages.append(target)
    target.content = "".join(texts)
    if refusals:
        target.refusal = "".join(refusals)


def _function_call(item: Item, path: str, messages: list[Message]) -> None:
    if not item.call_id:
        raise invalid("a function_call needs a call_id", f"{path}.call_id")
    if not item.name:
        raise invalid("a function_call needs a name", f"{path}.name")
    call = ToolCall(
        id=item.call_id, function=FunctionCall(name=item.name, arguments=item.arguments or "")
    )
    turn = _open_assistant(messages)
    if turn is None:
        turn = Message(role="assistant", content=None)
        messages.append(turn)
    if turn.tool_calls:
        turn.tool_calls.append(call)
    else:
        turn.tool_calls = [call]


def _function_output(item: Item, path: str) -> Message:
    if not item.call_id:
        raise invalid("a function_call_output needs a call_id", f"{path}.call_id")
    output = item.output
    if output is None:
        raise invalid("a function_call_output needs an output", f"{path}.output")
    if isinstance(output, str):
        return Message(role="tool", content=output, tool_call_id=item.call_id)
    parts = [_part(part, f"{path}.output[{i}]") for i, part in enumerate(output)]
    return Message(role="tool", content=parts, tool_call_id=item.call_id)


def _reasoning(item: Item, messages: list[Message]) -> None:
    content = item.content if isinstance(item.content, list) else []
    text = "".join(part.text for part in content if isinstance(part, _ReasoningText))
    if not text:
        text = "".join(part.text for part in item.summary or ())
    if not text:
        return  # an encrypted or empty reasoning item carries nothing the upstream can use
    turn = _open_assistant(messages)
    if turn is not None and turn.content is None and not turn.tool_calls:
        turn.reasoning_content = (turn.reasoning_content or "") + text
    else:
        messages.append(Message(role="assistant", content=None, reasoning_content=text))


def _part(part: Any, path: str) -> ContentPart:
    if isinstance(part, (_InputText, _OutputText)):
        return TextPart(text=part.text)
    if isinstance(part, _InputImage):
        if part.image_url:
            detail = part.detail if part.detail not in (None, "auto") else UNSET
            return ImagePart(image_url=ImageURL(url=part.image_url, detail=detail))
        raise invalid(
            "an input_image needs an image_url (an http(s) or data: URL); file_id images "
            "are not supported by the gateway",
            f"{path}.image_url",
        )
    if isinstance(part, _InputFile):
        if part.file_data:
            file: dict[str, Any] = {"file_data": part.file_data}
            if part.filename:
                file["filename"] = part.filename
            return FilePart(file=file)
        if part.file_id:
            return FilePart(file={"file_id": part.file_id})
        raise invalid("an input_file needs file_data or file_id", f"{path}.file_data")
    tag = type(part).__struct_config__.tag
    raise invalid(f"a {tag} part is not allowed here", f"{path}.type")
