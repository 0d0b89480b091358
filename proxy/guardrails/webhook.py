"""The ``webhook`` check: the operator's own service, asked with one JSON POST per phase.

The request carries the gateway's fields and, beside them, those of LiteLLM's generic guardrail
API, so that a service written for either understands it::

    {"check": "house-policy", "phase": "input" | "output", "texts": ["..."],
     "model": "gpt-4o", "key_alias": "ci-bot", "team": "support", "request_id": "...",
     "input_type": "request" | "response", "litellm_call_id": "<request id>",
     "litellm_trace_id": null, "structured_messages": null, "images": null, "tools": null,
     "request_data": {"user_api_key_alias": ..., "user_api_key_team_id": ...,
                      "user_api_key_user_id": ...},
     "additional_provider_specific_params": {}}

The service answers in either shape: ``{"verdict": "allow" | "block" | "modify", "reason",
"texts"}`` or LiteLLM's ``{"action": "NONE" | "BLOCKED" | "GUARDRAIL_INTERVENED",
"blocked_reason", "texts"}``. ``modify`` / ``GUARDRAIL_INTERVENED`` must give ``texts``, one per
text sent, in order. Anything else — a non-2xx status, a body that is not such JSON (or larger
than 1 MiB), a connection failure, no answer within ``timeout_ms`` — is a failed check, which its
``on_error`` decides. The reason a service gives is never shown to the client nor logged (it may
quote the texts).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import aiohttp
import msgspec

from proxy.core.canonical import Call
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import CheckConfig, Phase, WebhookCheck
from proxy.guardrails.texts import TextSet
from proxy.guardrails.verdicts import CLEAN, Finding
from proxy.pii.detectors import Finder

MAX_ANSWER_BYTES = 1024 * 1024


class _Answer(msgspec.Struct):
    verdict: Literal["allow", "block", "modify"] | None = None
    action: Literal["NONE", "BLOCKED", "GUARDRAIL_INTERVENED"] | None = None
    reason: str | None = None
    blocked_reason: str | None = None
    texts: list[str] | None = None


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Answer)
_VERDICTS = {"NONE": "allow", "BLOCKED": "block", "GUARDRAIL_INTERVENED": "modify"}


class Webhook:
    """A ``webhook`` check (see the module docstring)."""

    __slots__ = ("_clients", "_headers", "_timeout", "_url", "config", "finder", "name")

    def __init__(self, name: str, config: WebhookCheck, clients: Clients) -> None:
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._clients = clients
        self._url = config.url
        self._timeout = config.timeout_ms / 1000
        self._headers = {"content-type": "application/json", **config.headers}

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Ask the service about ``texts``; a failure is a failed finding (never raised)."""
        body = _ENCODER.encode(_request(self.name, texts.texts, call, phase))
        try:
            async with asyncio.timeout(self._timeout):
                raw = await self._post(body)
        except TimeoutError:
            return Finding(failed=True, reason="timed out")
        except (aiohttp.ClientError, OSError) as exc:
            return Finding(failed=True, reason=f"unreachable ({type(exc).__name__})")
        if isinstance(raw, str):
            return Finding(failed=True, reason=raw)
        return _finding(raw, len(texts.texts))

    async def _post(self, body: bytes) -> bytes | str:
        """The answer's body, or why there is none to read."""
        session = self._clients.session()
        async with session.post(self._url, data=body, headers=self._headers) as response:
            if response.status >= 300:
                return f"answered {response.status}"
            data = bytearray()
            async for piece in response.content.iter_chunked(64 * 1024):
                data += piece
                if len(data) > MAX_ANSWER_BYTES:
                    return "answered more than 1 MiB"
            return bytes(data)


def _request(name: str, texts: list[str], call: Call, phase: Phase) -> dict[str, Any]:
    principal = call.principal
    return {
        "check": name,
        "phase": phase,
        "texts": texts,
        "model": call.model,
        "key_alias": principal.key_alias,
        "team": principal.team,
        "request_id": call.request_id,
        "input_type": "request" if phase == "input" else "response",
        "litellm_call_id": call.request_id,
        "litellm_trace_id": None,
        "structured_messages": None,
        "images": None,
        "tools": None,
        "request_data": {
            "user_api_key_alias": principal.key_alias,
            "user_api_key_team_id": principal.team,
            "user_api_key_user_id": principal.user,
        },
        "additional_provider_specific_params": {},
    }


def _finding(raw: bytes, sent: int) -> Finding:
    """The finding a service's answer says, or a failed one for an answer that says nothing."""
    try:
        answer = _DECODER.decode(raw)
    except msgspec.DecodeError:
        return Finding(failed=True, reason="answered something that is not a verdict")
    verdict = answer.verdict or (None if answer.action is None else _VERDICTS[answer.action])
    if verdict is None:
        return Finding(failed=True, reason="answered no verdict")
    if verdict == "allow":
        return CLEAN
    if verdict == "block":
        return Finding(flagged=True, reason=answer.reason or answer.blocked_reason)
    if answer.texts is None or len(answer.texts) != sent:
        return Finding(failed=True, reason="modified without one text per text sent")
    return Finding(replacement=answer.texts)
