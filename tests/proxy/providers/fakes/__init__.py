"""Fake upstreams for the provider conformance suite: one per provider type, in ``FAKES``.

Each fake is a real aiohttp server speaking its provider's wire format (recorded-shape bodies,
real error envelopes, real SSE framing). ``tests/proxy/providers/test_conformance.py`` runs every
test against every entry of ``FAKES``: adding a provider is adding one fake module and one line
here, not a test file.

The interface (:class:`ProviderFake`, defined in :mod:`tests.proxy.providers.fakes.base`)::

    class ProviderFake(Protocol):
        type: str                       # the provider config `type` (also its key in FAKES)
        expected_usage: Usage           # canonical buckets of the fake's fixed native usage
        requests: list[Received]        # every request received (path, query, headers, body)
        streams_tool_arguments: bool    # False if the wire format sends arguments whole
        def config(self, base_url: str) -> dict[str, Any]: ...  # provider config mapping
        def app(self) -> aiohttp.web.Application: ...           # a fresh server
        def view(self, body: Any) -> RequestView: ...           # provider-neutral request view

    FAKES: dict[str, ProviderFake]

``config(base_url)`` is the YAML-equivalent provider mapping pointing at the fake's root URL
``http://127.0.0.1:PORT``; the suite adds ``timeouts`` when absent. ``view(body)`` reads a
recorded body back into a :class:`RequestView` (system prompt from wherever the provider wants
it, turns with roles ``user``/``assistant``/``tool`` and part kinds ``text``/``image``/
``tool_call``/``tool_result``, offered tool names), so the suite checks the translation without
knowing the wire format. ``openai_view`` (in :mod:`.openai`) serves every OpenAI-shaped fake.

Behaviour, chosen by the upstream model name, the same for every provider:

- ``text``: answers ``Hello from <type>`` (:func:`~.base.answer`), streamed in several chunks
  when the request streams. If the request offers tools and its last turn is not a tool result
  (:func:`~.base.wants_tool_call`), it calls the first tool with ``{"city": "Paris"}``
  (:data:`~.base.TOOL_ARGUMENTS`), the arguments streamed in many fragments where the wire
  format allows. Every answer reports the same fixed usage (``expected_usage`` once
  normalised), with cache reads, cache writes and reasoning tokens where the provider has them.
- ``fail-429``: the provider's rate-limit error with ``Retry-After: 3`` (Gemini says it the
  real way: a ``RetryInfo`` detail with ``retryDelay: 3s``); the client must see 3 seconds.
- ``fail-500``: a server error. ``fail-503``: overloaded (Anthropic: 529).
- ``fail-auth``: the provider's real answer to a bad key (401/403, Gemini: 400 API_KEY_INVALID).
- ``fail-context``: the provider's real context-window error.
- ``fail-policy``: the provider's real content-policy refusal.
- ``cut-stream``: streams the start of the text answer (at least one content chunk after the
  first event), then ends the body without the provider's end-of-stream signal. (Ending the body
  rather than resetting the socket keeps the test deterministic: a reset can overtake the
  bytes before it, which would fail the call before its first chunk instead of mid-stream.)
"""

from __future__ import annotations

from tests.proxy.providers.fakes.anthropic import AnthropicFake
from tests.proxy.providers.fakes.azure import AzureFake
from tests.proxy.providers.fakes.base import ProviderFake, Received, RequestView, Turn
from tests.proxy.providers.fakes.bedrock import BedrockFake
from tests.proxy.providers.fakes.gemini import GeminiFake
from tests.proxy.providers.fakes.openai import OpenAIFake

__all__ = ["FAKES", "ProviderFake", "Received", "RequestView", "Turn"]

FAKES: dict[str, ProviderFake] = {
    fake.type: fake
    for fake in [
        OpenAIFake(),
        AnthropicFake(),
        GeminiFake(),
        AzureFake(),
        BedrockFake(),
    ]
}
