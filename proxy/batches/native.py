"""Native batches: a batch whose model is an alias with a ``batch: native`` deployment runs
through that provider's own batch API (OpenAI's shape: ``/files`` and ``/batches`` under the
provider's ``base_url``), at its discount, instead of line by line through the chain.

:func:`plan_of` decides when a batch is created: every line must name the same alias, whose
first ``native`` deployment is on an ``openai``-type provider; otherwise the batch is
gateway-executed. The :class:`NativePlan` (provider, upstream model, the upstream batch's id
once submitted — never a key) is stored with the batch, so that a restart resumes polling.

:class:`NativeRunner` uploads the lines (their ``model`` rewritten to the upstream model) as a
JSONL file and creates the upstream batch, polls it, cancels it, and reads its output and error
files back. Each result line is recorded in the ledger as one request of the batch — the
deployment that served, the usage it reported, priced at the model's batch rate
(:meth:`~proxy.governance.pricing.ModelPrice.batch_nanos`) — through the snapshot's
``finished`` hooks. A native batch's lines are not reserved against budgets (their spend is
recorded when the results come). An upstream that answers an error raises
:class:`NativeFailed` with its status (its body is not kept: it may quote a key).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

from proxy.batches.batches_db import Line
from proxy.batches.objects import ENCODER
from proxy.core.canonical import Call, Principal, Usage
from proxy.core.plugin import FinishedRequest
from proxy.providers.openai.provider import OpenAIConfig
from proxy.runtime.config import GatewayConfig
from proxy.runtime.snapshot import Snapshot

OPENAI_BASE = "https://api.openai.com/v1"
UPSTREAM_TIMEOUT = 60.0
ENDED = ("completed", "failed", "expired", "cancelled")
"""An upstream batch's statuses that end it."""


class NativePlan(msgspec.Struct):
    """How a native batch runs: the ``provider`` and upstream ``model`` of the alias
    ``alias``'s native deployment, and the upstream batch's id once submitted."""

    provider: str
    model: str
    alias: str
    upstream_id: str | None = None
    cancel_sent: bool = False


PLAN_DECODER = msgspec.json.Decoder(NativePlan)


class _Model(msgspec.Struct):
    model: str | None = None


_MODEL = msgspec.json.Decoder(_Model)


class NativeFailed(Exception):
    """The provider's batch API answered an error (``status``) or could not be reached."""

    def __init__(self, what: str, status: int | None) -> None:
        super().__init__(f"{what}: upstream status {status}" if status else what)
        self.status = status


def plan_of(config: GatewayConfig, lines: list[tuple[str, bytes]]) -> NativePlan | None:
    """The native plan of a batch of ``lines`` (module docstring), or None."""
    models = {_MODEL.decode(body).model for _, body in lines}
    if len(models) != 1:
        return None
    (alias,) = models
    if alias is None:
        return None
    for deployment in config.models.get(alias, ()):
        if deployment.batch != "native":
            continue
        provider, _, model = deployment.target.partition("/")
        if isinstance(config.providers.get(provider), OpenAIConfig):
            return NativePlan(provider, model, alias)
    return None


class NativeRunner:
    """Talks to the providers' batch APIs with the current snapshot's credentials."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def _target(self, plan: NativePlan) -> tuple[str, dict[str, str]]:
        provider = self._snapshot().config.providers.get(plan.provider)
        if not isinstance(provider, OpenAIConfig):
            raise NativeFailed(f"provider {plan.provider!r} is not configured any more", None)
        headers = dict(provider.headers)
        if provider.api_key:
            headers["authorization"] = f"Bearer {provider.api_key}"
        return (provider.base_url or OPENAI_BASE).rstrip("/"), headers

    async def _call(
        self, plan: NativePlan, method: str, path: str, what: str, **kwargs: Any
    ) -> bytes:
        base, headers = self._target(plan)
        timeout = aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(method, base + path, headers=headers, **kwargs) as answer,
            ):
                body = await answer.read()
                if answer.status >= 400:
                    raise NativeFailed(what, answer.status)
                return body
        except aiohttp.ClientError as exc:
            raise NativeFailed(f"{what}: {type(exc).__name__}", None) from None

    async def submit(self, plan: NativePlan, endpoint: str, lines: list[Line]) -> str:
        """Upload ``lines`` and create the upstream batch; its id."""
        content = b"".join(
            ENCODER.encode(
                {
                    "custom_id": line.custom_id,
                    "method": "POST",
                    "url": endpoint,
                    "body": {**msgspec.json.decode(line.body), "model": plan.model},
                }
            )
            + b"\n"
            for line in lines
        )
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", content, filename="batch.jsonl", content_type="application/jsonl")
        uploaded = msgspec.json.decode(
            await self._call(plan, "POST", "/files", "uploading the batch file", data=form)
        )
        created = msgspec.json.decode(
            await self._call(
                plan,
                "POST",
                "/batches",
                "creating the batch",
                json={
                    "input_file_id": uploaded["id"],
                    "endpoint": endpoint,
                    "completion_window": "24h",
                },
            )
        )
        return str(created["id"])

    async def status(self, plan: NativePlan) -> dict[str, Any]:
        """The upstream batch object."""
        body = await self._call(plan, "GET", f"/batches/{plan.upstream_id}", "polling the batch")
        found: dict[str, Any] = msgspec.json.decode(body)
        return found

    async def cancel(self, plan: NativePlan) -> None:
        """Ask the provider to cancel the upstream batch."""
        path = f"/batches/{plan.upstream_id}/cancel"
        await self._call(plan, "POST", path, "cancelling the batch")

    async def download(self, plan: NativePlan, file_id: str) -> bytes:
        """An upstream file's bytes (an output or error file)."""
        return await self._call(plan, "GET", f"/files/{file_id}/content", "reading a result file")

    def account(self, plan: NativePlan, batch_id: str, principal: Principal, line: Any) -> None:
        """Record one result ``line`` (a decoded output-file line) in the ledger."""
        snapshot = self._snapshot()
        response = line.get("response") or {}
        status = int(response.get("status_code") or 500)
        given = response.get("body")
        body: dict[str, Any] = given if isinstance(given, dict) else {}
        usage = _usage(body.get("usage"))
        call = Call(
            str(response.get("request_id") or line.get("id") or uuid.uuid4().hex),
            "openai",
            plan.alias,
            [],
            principal=principal,
        )
        call.accounting.batch_id = batch_id
        price = snapshot.prices.price(plan.provider, plan.model)
        if price is not None and usage is not None:
            call.accounting.cost_nanos = price.batch_nanos(usage)
            call.accounting.cost_source = "estimated"
        failure = line.get("error")
        error = failure.get("code") if isinstance(failure, dict) else None
        if error is None and status >= 400:
            error = (body.get("error") or {}).get("code") or "upstream_error"
        finished = FinishedRequest(
            request_id=call.request_id,
            dialect="openai",
            call=call,
            principal=principal,
            status=status,
            provider=plan.provider,
            upstream_model=plan.model,
            usage=usage,
            error_code=None if error is None else str(error)[:64],
            duration=0.0,
            ended_at=time.time(),
            attempts=1,
        )
        for hook in snapshot.finishers:
            try:
                hook(finished)
            except Exception:
                snapshot.logger.exception("finished_hook_failed", request_id=call.request_id)


def _usage(raw: Any) -> Usage | None:
    """An OpenAI usage object (chat completions', embeddings' or Responses') as a Usage."""
    if not isinstance(raw, dict):
        return None
    prompt = int(raw.get("prompt_tokens", raw.get("input_tokens", 0)) or 0)
    completion = int(raw.get("completion_tokens", raw.get("output_tokens", 0)) or 0)
    details = raw.get("prompt_tokens_details") or raw.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens", 0) or 0) if isinstance(details, dict) else 0
    out = raw.get("completion_tokens_details") or raw.get("output_tokens_details") or {}
    reasoning = int(out.get("reasoning_tokens", 0) or 0) if isinstance(out, dict) else 0
    return Usage(
        input=max(prompt - cached, 0),
        cache_read=cached,
        output=max(completion - reasoning, 0),
        reasoning=reasoning,
    )
