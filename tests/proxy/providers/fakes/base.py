"""The contract every provider fake honours, and the helpers fakes share.

See the package docstring (:mod:`tests.proxy.providers.fakes`) for the behaviour by model name.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NamedTuple, Protocol

from aiohttp import web

from proxy.core.canonical import Usage

TOOL_ARGUMENTS: dict[str, Any] = {"city": "Paris"}
RETRY_AFTER = "3"
CUT_MODEL = "cut-stream"
FAIL_PREFIX = "fail-"


def answer(provider_type: str) -> str:
    """The text every fake answers with: ``Hello from <type>``."""
    return f"Hello from {provider_type}"


def split(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` non-empty fragments (fewer if it is shorter)."""
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def word_pieces(text: str) -> list[str]:
    """``text`` as streamed word by word: ``["Hello", " from", " x"]``."""
    words = text.split(" ")
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def tool_arguments_text() -> str:
    """The tool arguments as JSON text, as a model would write them."""
    return json.dumps(TOOL_ARGUMENTS)


@dataclasses.dataclass
class Received:
    """One request a fake received: path, query, headers and decoded JSON body."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


async def receive(request: web.Request, into: list[Received]) -> Received:
    """Read ``request``'s JSON body, record it in ``into`` and return the record."""
    received = Received(
        path=request.path,
        query=dict(request.query),
        headers=dict(request.headers),
        body=await request.json(),
    )
    into.append(received)
    return received


class Turn(NamedTuple):
    """A provider-neutral view of one conversation turn as the provider received it.

    ``role`` is ``user``, ``assistant`` or ``tool`` (providers that carry tool results in a user
    turn say ``user``); ``kinds`` are the turn's parts in order, each ``text``, ``image``,
    ``tool_call`` or ``tool_result``; ``text`` is the turn's text (tool-result text included),
    parts joined with ``""``.
    """

    role: str
    kinds: tuple[str, ...]
    text: str


class RequestView(NamedTuple):
    """A provider-neutral view of a translated request: where the provider wants each thing.

    ``system`` is the system prompt read from the provider's place for it (``""`` if none),
    ``turns`` the conversation without it, ``tools`` the names of the tools offered.
    """

    system: str
    turns: tuple[Turn, ...]
    tools: tuple[str, ...]


def wants_tool_call(view: RequestView) -> bool:
    """The fake should call a tool: tools are offered and the last turn is not a tool result."""
    return bool(view.tools) and not (view.turns and "tool_result" in view.turns[-1].kinds)


class ProviderFake(Protocol):
    """A real server speaking one provider's wire format, for the conformance suite."""

    type: str
    """The provider config ``type`` (also the key in ``FAKES``)."""

    expected_usage: Usage
    """The canonical buckets the fake's fixed provider-native usage numbers must become."""

    requests: list[Received]
    """Every request received, in order (the suite clears it before each test)."""

    streams_tool_arguments: bool
    """Whether the wire format streams tool-call arguments in fragments (Gemini: whole)."""

    def config(self, base_url: str) -> dict[str, Any]:
        """The provider config mapping (YAML-equivalent) pointing at ``base_url``.

        ``base_url`` is the fake server's root, ``http://127.0.0.1:PORT`` (no trailing slash).
        The provider must be ready (give it a key). The suite adds ``timeouts`` if absent.
        """
        ...

    def app(self) -> web.Application:
        """A fresh server application for this fake (it records into ``requests``)."""
        ...

    def view(self, body: Any) -> RequestView:
        """The provider-neutral view of one recorded request body."""
        ...
