"""The request side of the Gemini provider: canonical call → ``GenerateContentRequest`` (v1beta).

:class:`Request` is the wire body; :mod:`proxy.providers.gemini.provider` fills it from the
translations here, adds the passed-through extra fields and picks the URL. The wire types are also
the response's: :class:`Content` (its parts, function calls and thought signatures) is what the
provider decodes a candidate into, and :data:`SIGNATURE_MARK` is how a tool-call id it made
carries a ``thoughtSignature`` back here.

- :func:`conversation` (``messages``): ``system`` and ``developer`` messages →
  ``systemInstruction`` (one text part each). Roles ``user`` → ``user``, ``assistant`` →
  ``model``; ``tool`` messages → ``functionResponse`` parts of a user turn, named after the tool
  call they answer (found in the earlier assistant turn, else the message's ``name``). The
  response object is the tool's JSON output when that is an object, else
  ``{"output": <value or text>}`` (the convention the API documents). Consecutive turns of the
  same role are merged.
- Parts: text → ``text``; a refusal → ``text``; ``image_url`` ``data:`` URLs and audio →
  ``inlineData``; http(s) image URLs → ``fileData`` (MIME type guessed from the path); a
  ``file`` part with a ``data:`` URL → ``inlineData``. Assistant ``tool_calls`` →
  ``functionCall`` parts, with the ``thoughtSignature`` an id carries after
  :data:`SIGNATURE_MARK`; assistant ``reasoning_content`` is not sent back.
- :func:`tools` → one ``functionDeclarations`` tool, parameters sent as
  ``parametersJsonSchema`` (the client's JSON Schema unchanged, no lossy conversion to the
  OpenAPI subset); :func:`tool_config`: ``tool_choice`` ``auto`` / ``none`` / ``required`` /
  ``{function}`` → ``AUTO`` / ``NONE`` / ``ANY`` / ``ANY`` with ``allowedFunctionNames``.
- :func:`generation_config` (absent when empty): ``temperature``, ``top_p`` → ``topP``,
  ``top_k`` (an extra field) → ``topK``, ``max_completion_tokens``/``max_tokens`` →
  ``maxOutputTokens``, ``stop`` → ``stopSequences``, ``n`` → ``candidateCount``, ``seed``,
  presence/frequency penalties; ``response_format`` ``json_object`` → ``responseMimeType:
  application/json``, ``json_schema`` → that plus ``responseJsonSchema``; ``reasoning_effort``
  → ``thinkingConfig`` with :data:`THINKING_BUDGETS` (Google's own OpenAI-compatibility
  mapping: low 1024, medium 8192, high 24576; ``none`` → budget 0) and ``includeThoughts`` so
  thought summaries come back as ``reasoning_content``.

Input the API cannot take is a :class:`~proxy.core.errors.BadRequest` whose ``param`` names it: a
role other than ``system``, ``developer``, ``user``, ``assistant`` and ``tool``
(``messages[i].role``); a file that is not a ``data:`` URL in ``file_data``, an image that is
neither an http(s) URL nor a base64 ``data:`` URL, a ``data:`` URL not of the form
``data:<media type>;base64,<data>`` (``messages[i].content[j]``); tool-call arguments that are
not a JSON object (``messages[i].tool_calls[j].function.arguments``); a tool message that
answers no tool call of an earlier assistant message and has no ``name``
(``messages[i].tool_call_id``); a ``tool_choice`` object that names no function
(``tool_choice``); a ``json_schema`` response format without a schema
(``response_format.json_schema``); a ``top_k`` that is not an integer (``top_k``).
"""

from __future__ import annotations

import mimetypes
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from proxy.core.canonical import (
    AudioPart,
    Call,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    Params,
    RefusalPart,
    TextPart,
)
from proxy.core.errors import BadRequest

THINKING_BUDGETS: dict[str, int] = {
    "none": 0,
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
    "max": 24576,
}
"""``reasoning_effort`` → ``thinkingConfig.thinkingBudget`` (24576 is valid on every 2.5 model)."""


SIGNATURE_MARK = "__thought__"
"""Separates a generated tool-call id from the ``thoughtSignature`` carried inside it."""


# --- wire types (the response's candidates are decoded into Content too) ---------------------


class _Blob(Struct, rename="camel"):
    mime_type: str
    data: str


class _FileData(Struct, rename="camel"):
    mime_type: str
    file_uri: str


class _FunctionCall(Struct, omit_defaults=True):
    name: str
    args: Raw | UnsetType = UNSET
    id: str | UnsetType = UNSET


class _FunctionResponse(Struct):
    name: str
    response: Raw


class _Part(Struct, omit_defaults=True, rename="camel"):
    text: str | UnsetType = UNSET
    inline_data: _Blob | UnsetType = UNSET
    file_data: _FileData | UnsetType = UNSET
    function_call: _FunctionCall | UnsetType = UNSET
    function_response: _FunctionResponse | UnsetType = UNSET
    thought: bool | UnsetType = UNSET
    thought_signature: str | UnsetType = UNSET


class Content(Struct, omit_defaults=True):
    parts: list[_Part] = msgspec.field(default_factory=list)
    role: str | UnsetType = UNSET


class _FunctionDeclaration(Struct, omit_defaults=True, rename="camel"):
    name: str
    description: str | UnsetType = UNSET
    parameters_json_schema: dict[str, Any] | UnsetType = UNSET


class _Tool(Struct, rename="camel"):
    function_declarations: list[_FunctionDeclaration]


class _FunctionCallingConfig(Struct, omit_defaults=True, rename="camel"):
    mode: str
    allowed_function_names: list[str] | UnsetType = UNSET


class _ToolConfig(Struct, rename="camel"):
    function_calling_config: _FunctionCallingConfig


class _ThinkingConfig(Struct, omit_defaults=True, rename="camel"):
    thinking_budget: int
    include_thoughts: bool | UnsetType = UNSET


class _GenerationConfig(Struct, omit_defaults=True, rename="camel"):
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    top_k: int | UnsetType = UNSET
    max_output_tokens: int | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    candidate_count: int | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET
    response_mime_type: str | UnsetType = UNSET
    response_json_schema: dict[str, Any] | UnsetType = UNSET
    thinking_config: _ThinkingConfig | UnsetType = UNSET


class Request(Struct, omit_defaults=True, rename="camel"):
    contents: list[Content]
    system_instruction: Content | UnsetType = UNSET
    tools: list[_Tool] | UnsetType = UNSET
    tool_config: _ToolConfig | UnsetType = UNSET
    generation_config: _GenerationConfig | UnsetType = UNSET


# --- translation -------------------------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()
_ANY_DECODER = msgspec.json.Decoder()
_INT_DECODER = msgspec.json.Decoder(int)


def conversation(messages: list[Message]) -> tuple[list[_Part], list[Content]]:
    """The ``systemInstruction`` parts and the contents for ``messages`` (see module docstring)."""
    system: list[_Part] = []
    contents: list[Content] = []
    names: dict[str, str] = {}
    for position, message in enumerate(messages):
        role = message.role
        if role in ("system", "developer"):
            text = message.text()
            if text:
                system.append(_Part(text=text))
            continue
        turn: Literal["user", "model"]  # Gemini's two roles of a content
        if role == "user":
            turn = "user"
            parts = _parts(message.content, position)
        elif role == "assistant":
            turn = "model"
            parts = _parts(message.content, position) + _function_calls(message, position, names)
        elif role == "tool":
            turn = "user"
            parts = [_function_response(message, position, names)]
        else:
            raise BadRequest(
                f"messages[{position}]: role {role!r} is not supported by the gemini provider;"
                " use tool messages",
                param=f"messages[{position}].role",
            )
        if not parts:
            continue
        if contents and contents[-1].role == turn:
            contents[-1].parts.extend(parts)
        else:
            contents.append(Content(parts=parts, role=turn))
    return system, contents


def _parts(content: str | list[ContentPart] | None, position: int) -> list[_Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_Part(text=content)] if content else []
    parts: list[_Part] = []
    for index, part in enumerate(content):
        where = f"messages[{position}].content[{index}]"
        if isinstance(part, TextPart):
            if part.text:
                parts.append(_Part(text=part.text))
        elif isinstance(part, RefusalPart):
            parts.append(_Part(text=part.refusal))
        elif isinstance(part, ImagePart):
            parts.append(_media(part.image_url.url, where))
        elif isinstance(part, AudioPart):
            mime_type = f"audio/{part.input_audio.format}"
            parts.append(_Part(inline_data=_Blob(mime_type=mime_type, data=part.input_audio.data)))
        elif isinstance(part, FilePart):
            data_url = part.file.get("file_data")
            if not isinstance(data_url, str) or not data_url.startswith("data:"):
                raise BadRequest(
                    "the gemini provider accepts files only as data: URLs in file_data",
                    param=where,
                )
            parts.append(_media(data_url, where))
    return parts


def _media(url: str, where: str) -> _Part:
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        mime_type, _, encoding = header.partition(";")
        if not comma or encoding != "base64" or not mime_type:
            raise BadRequest("a data: URL must be data:<media type>;base64,<data>", param=where)
        return _Part(inline_data=_Blob(mime_type=mime_type, data=data))
    if url.startswith(("http://", "https://")):
        mime_type = mimetypes.guess_type(url.split("?", 1)[0])[0] or "image/jpeg"
        return _Part(file_data=_FileData(mime_type=mime_type, file_uri=url))
    raise BadRequest("an image must be an http(s) URL or a base64 data: URL", param=where)


def _function_calls(message: Message, position: int, names: dict[str, str]) -> list[_Part]:
    if not message.tool_calls:
        return []
    parts: list[_Part] = []
    for index, tool_call in enumerate(message.tool_calls):
        name = tool_call.function.name
        names[tool_call.id] = name
        arguments = tool_call.function.arguments.strip() or "{}"
        if not isinstance(_decode_any(arguments), dict):
            raise BadRequest(
                "tool call arguments must be a JSON object",
                param=f"messages[{position}].tool_calls[{index}].function.arguments",
            )
        _, mark, signature = tool_call.id.partition(SIGNATURE_MARK)
        parts.append(
            _Part(
                function_call=_FunctionCall(name=name, args=Raw(arguments)),
                thought_signature=signature if mark else UNSET,
            )
        )
    return parts


def _function_response(message: Message, position: int, names: dict[str, str]) -> _Part:
    call_id = message.tool_call_id
    name = names.get(call_id) if isinstance(call_id, str) else None
    if name is None:
        name = message.name if isinstance(message.name, str) else None
    if name is None:
        raise BadRequest(
            "a tool message must answer a tool call of an earlier assistant message",
            param=f"messages[{position}].tool_call_id",
        )
    text = message.text()
    value = _decode_any(text)
    if isinstance(value, dict):
        response = Raw(text.encode())
    else:
        response = Raw(_ENCODER.encode({"output": text if value is _INVALID else value}))
    return _Part(function_response=_FunctionResponse(name=name, response=response))


_INVALID = object()


def _decode_any(text: str) -> Any:
    """The JSON value of ``text``, or ``_INVALID`` if it is not JSON."""
    try:
        return _ANY_DECODER.decode(text)
    except msgspec.DecodeError:
        return _INVALID


def tools(call: Call) -> list[_Tool] | UnsetType:
    tools = call.params.tools
    if not tools:
        return UNSET
    declarations = [
        _FunctionDeclaration(
            name=tool.function.name,
            description=tool.function.description,
            parameters_json_schema=tool.function.parameters,
        )
        for tool in tools
    ]
    return [_Tool(function_declarations=declarations)]


def tool_config(choice: str | dict[str, Any] | UnsetType | None) -> _ToolConfig | UnsetType:
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise BadRequest("tool_choice must name a function", param="tool_choice")
        calling = _FunctionCallingConfig(mode="ANY", allowed_function_names=[name])
    elif choice == "none":
        calling = _FunctionCallingConfig(mode="NONE")
    elif choice == "required":
        calling = _FunctionCallingConfig(mode="ANY")
    elif choice == "auto":
        calling = _FunctionCallingConfig(mode="AUTO")
    else:
        return UNSET
    return _ToolConfig(function_calling_config=calling)


def generation_config(params: Params, extra: dict[str, Raw]) -> _GenerationConfig | UnsetType:
    config = _GenerationConfig(
        temperature=_unset(params.temperature),
        top_p=_unset(params.top_p),
        top_k=_top_k(extra),
        max_output_tokens=_first_int(params.max_completion_tokens, params.max_tokens),
        stop_sequences=[params.stop] if isinstance(params.stop, str) else params.stop or UNSET,
        candidate_count=_unset(params.n),
        seed=_unset(params.seed),
        presence_penalty=_unset(params.presence_penalty),
        frequency_penalty=_unset(params.frequency_penalty),
        thinking_config=_thinking(params.reasoning_effort),
    )
    response_format = params.response_format
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            config.response_mime_type = "application/json"
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise BadRequest(
                    "response_format json_schema needs a schema",
                    param="response_format.json_schema",
                )
            config.response_json_schema = schema
    return UNSET if config == _EMPTY_CONFIG else config


_EMPTY_CONFIG = _GenerationConfig()


def _thinking(effort: str | UnsetType | None) -> _ThinkingConfig | UnsetType:
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    if budget is None:
        return UNSET
    return _ThinkingConfig(thinking_budget=budget, include_thoughts=True if budget else UNSET)


def _top_k(extra: dict[str, Raw]) -> int | UnsetType:
    raw = extra.get("top_k")
    if raw is None:
        return UNSET
    try:
        return _INT_DECODER.decode(raw)
    except msgspec.DecodeError:
        raise BadRequest("top_k must be an integer", param="top_k") from None


def _unset(value: Any) -> Any:
    return UNSET if value is None else value


def _first_int(*values: int | UnsetType | None) -> int | UnsetType:
    for value in values:
        if isinstance(value, int):
            return value
    return UNSET
