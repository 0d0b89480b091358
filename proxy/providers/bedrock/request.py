"""The request side of the Bedrock provider: canonical call → Converse request body.

:func:`converse_body` builds the JSON value (plain dicts and lists) that
:mod:`proxy.providers.bedrock.provider` encodes, signs and sends to ``/model/{modelId}/converse``
(or ``/converse-stream``); it is the same body for both.

- ``system`` and ``developer`` messages become ``system`` text blocks; the conversation becomes
  alternating ``user``/``assistant`` turns of content blocks (consecutive same-role messages,
  and tool results, which Bedrock carries in user turns, are merged, a turn's tool results
  first, as Bedrock requires).
- Content: text and refusals → ``text`` blocks (empty text is dropped); images must be
  ``data:image/<png|jpeg|gif|webp>;base64,`` URLs (sent as bytes) or ``s3://`` URLs (the format
  from the extension).
- Assistant tool calls → ``toolUse`` blocks (the arguments parsed into a JSON object, empty
  arguments ``{}``); tool messages → ``toolResult`` blocks (their text, or an empty JSON
  object).
- ``max_completion_tokens`` (else ``max_tokens``), ``temperature``, ``top_p`` and ``stop`` go to
  ``inferenceConfig`` (absent when empty).
- ``tools`` and ``tool_choice`` (``auto``, ``required`` → ``any``, a named function →
  ``tool``, ``none`` → no tools offered) go to ``toolConfig``; when the conversation holds tool
  calls but no tools are offered, the tools it used are declared schema-less (Bedrock requires
  them).
- Converse's own top-level fields (:data:`PASS_THROUGH`: ``additionalModelRequestFields`` —
  e.g. a model's thinking settings —, ``guardrailConfig``, …) pass through from the client's
  request verbatim. Parameters Converse has no place for (seed, penalties, logprobs,
  logit_bias, user, response_format, reasoning_effort, parallel_tool_calls) are dropped.

Input Converse cannot take is a :class:`~proxy.core.errors.BadRequest` whose ``param`` names it:
``n`` above 1 (``n``); content other than text, refusals and images, an image that is not a
base64 ``data:`` URL or an ``s3://`` URL, in another format than png, jpeg, gif and webp, or
with invalid base64 (``messages[i].content[j]``); tool-call arguments that are not JSON or not
a JSON object (``messages[i].tool_calls[j]``); a ``tool_choice`` object that names no function,
or a ``tool_choice`` other than ``auto``, ``required``, ``none`` and a named function
(``tool_choice``).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from msgspec import UNSET

from proxy.core.canonical import Call, ImagePart, Message, RefusalPart, TextPart
from proxy.core.errors import BadRequest
from proxy.providers.base import merge_into_turn

PASS_THROUGH = frozenset(
    {
        "additionalModelRequestFields",
        "additionalModelResponseFieldPaths",
        "guardrailConfig",
        "performanceConfig",
        "promptVariables",
        "requestMetadata",
    }
)
"""Converse request fields a client may send as extra fields; they are passed on verbatim."""

_IMAGE_FORMATS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg", "gif": "gif", "webp": "webp"}


def converse_body(call: Call) -> dict[str, Any]:
    """The Converse request body for ``call``. Raises :class:`BadRequest`."""
    params = call.params
    if isinstance(params.n, int) and params.n > 1:
        raise BadRequest("bedrock returns one choice per request: n must be 1", param="n")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    used_tools: list[str] = []
    for i, message in enumerate(call.messages):
        if message.role in ("system", "developer"):
            text = message.text()
            if text:
                system.append({"text": text})
            continue
        role, blocks = _turn(message, i, used_tools)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            merge_into_turn(turns[-1]["content"], blocks, _is_tool_result)
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system
    inference = _inference_config(call)
    if inference:
        body["inferenceConfig"] = inference
    tool_config = _tool_config(call, used_tools)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    for name, raw in call.extra.items():
        if name in PASS_THROUGH:
            body[name] = raw
    return body


def _is_tool_result(block: dict[str, Any]) -> bool:
    return "toolResult" in block


def _turn(message: Message, i: int, used_tools: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The Converse role and content blocks of one non-system message."""
    if message.role == "tool":
        result: dict[str, Any] = {"toolUseId": message.tool_call_id or ""}
        text = message.text()
        result["content"] = [{"text": text}] if text else [{"json": {}}]
        return "user", [{"toolResult": result}]
    role = "assistant" if message.role == "assistant" else "user"
    blocks = _content_blocks(message, i)
    if message.role == "assistant" and message.tool_calls:
        for j, tool_call in enumerate(message.tool_calls):
            used_tools.append(tool_call.function.name)
            blocks.append(
                {
                    "toolUse": {
                        "toolUseId": tool_call.id,
                        "name": tool_call.function.name,
                        "input": _arguments(tool_call.function.arguments, i, j),
                    }
                }
            )
    return role, blocks


def _content_blocks(message: Message, i: int) -> list[dict[str, Any]]:
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, TextPart | RefusalPart):
            text = part.text if isinstance(part, TextPart) else part.refusal
            if text:
                blocks.append({"text": text})
        elif isinstance(part, ImagePart):
            blocks.append({"image": _image(part.image_url.url, f"messages[{i}].content[{j}]")})
        else:
            raise BadRequest(
                f"bedrock does not accept {type(part).__name__} content through this gateway",
                param=f"messages[{i}].content[{j}]",
            )
    return blocks


def _image(url: str, param: str) -> dict[str, Any]:
    """A Converse image block from a ``data:`` URL (base64) or an ``s3://`` URL."""
    if url.startswith("s3://"):
        extension = url.rsplit(".", 1)[-1].lower()
        image_format = _IMAGE_FORMATS.get(extension)
        if image_format is None:
            raise BadRequest(f"bedrock images must be png, jpeg, gif or webp: {url}", param=param)
        return {"format": image_format, "source": {"s3Location": {"uri": url}}}
    header, _, data = url.partition(",")
    if not url.startswith("data:image/") or not header.endswith(";base64") or not data:
        raise BadRequest(
            "bedrock accepts images only as base64 data: URLs or s3:// URLs", param=param
        )
    image_format = _IMAGE_FORMATS.get(header[len("data:image/") : -len(";base64")].lower())
    if image_format is None:
        raise BadRequest("bedrock images must be png, jpeg, gif or webp", param=param)
    try:
        base64.b64decode(data, validate=True)
    except ValueError:
        raise BadRequest("the image data is not valid base64", param=param) from None
    return {"format": image_format, "source": {"bytes": data}}


def _arguments(arguments: str, i: int, j: int) -> Any:
    """Tool-call arguments (JSON text) as the JSON object Converse wants."""
    if not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        raise BadRequest(
            "tool call arguments must be JSON", param=f"messages[{i}].tool_calls[{j}]"
        ) from None
    if not isinstance(value, dict):
        raise BadRequest(
            "tool call arguments must be a JSON object", param=f"messages[{i}].tool_calls[{j}]"
        )
    return value


def _inference_config(call: Call) -> dict[str, Any]:
    params = call.params
    config: dict[str, Any] = {}
    max_tokens = params.max_completion_tokens or params.max_tokens
    if max_tokens:
        config["maxTokens"] = max_tokens
    if params.temperature is not UNSET and params.temperature is not None:
        config["temperature"] = params.temperature
    if params.top_p is not UNSET and params.top_p is not None:
        config["topP"] = params.top_p
    stop = params.stop
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    elif isinstance(stop, list) and stop:
        config["stopSequences"] = stop
    return config


def _tool_config(call: Call, used_tools: list[str]) -> dict[str, Any] | None:
    """Tools offered and the choice among them; Bedrock needs the tools whenever the
    conversation holds tool calls, so those are declared (schema-less) if none are offered."""
    params = call.params
    choice = params.tool_choice
    offered = params.tools if isinstance(params.tools, list) else []
    if choice == "none":
        offered = []
    specs = [
        {
            "toolSpec": {
                "name": tool.function.name,
                **(
                    {"description": tool.function.description}
                    if isinstance(tool.function.description, str) and tool.function.description
                    else {}
                ),
                "inputSchema": {
                    "json": tool.function.parameters
                    if isinstance(tool.function.parameters, dict)
                    else {"type": "object", "properties": {}}
                },
            }
        }
        for tool in offered
    ]
    if not specs:
        names = list(dict.fromkeys(used_tools))
        if not names:
            return None
        specs = [
            {"toolSpec": {"name": name, "inputSchema": {"json": {"type": "object"}}}}
            for name in names
        ]
        return {"tools": specs}
    config: dict[str, Any] = {"tools": specs}
    if choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise BadRequest("tool_choice must name a function", param="tool_choice")
        config["toolChoice"] = {"tool": {"name": name}}
    elif choice not in (UNSET, None, "none"):
        raise BadRequest(f"unsupported tool_choice {choice!r}", param="tool_choice")
    return config
