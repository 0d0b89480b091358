"""``GET /v1/responses/{id}/input_items``: a stored response's input, as OpenAI lists it.

The input of a response is the canonical messages its request contributed (its ``input``, not
its ``instructions`` nor the conversation of ``previous_response_id``), rendered back as the
API's input item resources, each with an id derived from the response's and its place in the
input (``msg_…``, ``fc_…``, ``fco_…``, ``_in{index}``) so the same input always lists the same:

- ``user`` / ``system`` / ``developer`` messages: a ``message`` item with ``input_text``,
  ``input_image`` and ``input_file`` parts (a string content is one ``input_text`` part);
- ``assistant`` messages: a ``message`` item with ``output_text`` / ``refusal`` parts when it
  has text, then a ``function_call`` item per tool call;
- ``tool`` messages: a ``function_call_output`` item answering their ``call_id``.

:func:`page` cuts the list as the API does: ``order`` ``desc`` (the default: newest first) or
``asc``, ``after`` / ``before`` an item id (an id not in the list is a 400 naming the field),
``limit`` 1 to 100 (default 20); ``has_more`` says whether items remain past the page.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct

from proxy.core.canonical import FilePart, ImagePart, Message, RefusalPart, TextPart
from proxy.core.errors import BadRequest

MAX_LIMIT = 100
DEFAULT_LIMIT = 20


class ItemList(Struct):
    """The list object ``input_items`` answers."""

    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


def input_items(response_id: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The input item resources of ``messages`` (see the module docstring), oldest first."""
    items: list[dict[str, Any]] = []
    for message in messages:
        position = len(items)
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "id": _id(response_id, "fco", position),
                    "call_id": message.tool_call_id or "",
                    "output": message.text(),
                    "status": "completed",
                }
            )
            continue
        if message.role == "assistant":
            items.extend(_assistant(response_id, message, position))
            continue
        items.append(
            {
                "type": "message",
                "id": _id(response_id, "msg", position),
                "role": message.role,
                "status": "completed",
                "content": _input_parts(message),
            }
        )
    return items


def page(
    items: list[dict[str, Any]],
    *,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
    before: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> ItemList:
    """One page of ``items`` (oldest first), cut as the module docstring says."""
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start, end = 0, len(ordered)
    if after is not None:
        start = _position(ids, after, "after") + 1
    if before is not None:
        end = _position(ids, before, "before")
    window = ordered[start:end]
    chosen = window[:limit]
    return ItemList(
        data=chosen,
        first_id=chosen[0]["id"] if chosen else None,
        last_id=chosen[-1]["id"] if chosen else None,
        has_more=len(window) > limit,
    )


def _position(ids: list[str], wanted: str, field: str) -> int:
    try:
        return ids.index(wanted)
    except ValueError:
        raise BadRequest(f"No input item with id {wanted!r}.", param=field) from None


def _id(response_id: str, prefix: str, position: int) -> str:
    return f"{prefix}_{response_id.removeprefix('resp_')}_in{position}"


def _assistant(response_id: str, message: Message, position: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    text = message.text()
    if text:
        parts.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    if message.refusal:
        parts.append({"type": "refusal", "refusal": message.refusal})
    if parts:
        items.append(
            {
                "type": "message",
                "id": _id(response_id, "msg", position),
                "role": "assistant",
                "status": "completed",
                "content": parts,
            }
        )
    for call in message.tool_calls or ():
        items.append(
            {
                "type": "function_call",
                "id": _id(response_id, "fc", position + len(items)),
                "call_id": call.id,
                "name": call.function.name,
                "arguments": call.function.arguments,
                "status": "completed",
            }
        )
    return items


def _input_parts(message: Message) -> list[dict[str, Any]]:
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            detail = part.image_url.detail if isinstance(part.image_url.detail, str) else "auto"
            parts.append({"type": "input_image", "image_url": part.image_url.url, "detail": detail})
        elif isinstance(part, FilePart):
            parts.append({"type": "input_file", **part.file})
        elif isinstance(part, RefusalPart):
            parts.append({"type": "input_text", "text": part.refusal})
    return parts
