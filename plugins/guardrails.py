"""``guardrails``: policy checks on what goes in and comes out, built in or the operator's own.

The checks are defined once, by name, in the config's top-level ``guardrails:`` section
(:mod:`proxy.guardrails.config`); this plugin says who runs which: ``default`` (every request),
``teams`` (by team id) and ``keys`` (by key alias or id), to which each key's and team's own
list (``metadata.guardrails``, through the admin API) and what a request adds by name are
joined (:mod:`proxy.guardrails.selection`). The checks run around the rest of the chain
(:mod:`proxy.guardrails.engine`): a ``block`` is a 400 ``content_policy_violation`` naming the
check (for an output check on a stream, the dialect's in-band error event, and no more
content), ``warn`` is served with ``x-crossway-guardrails: warned=<names>``. ``stream_window``
is how many characters of a streamed answer the text checks hold back to see a word split
across chunks. See ``docs/guardrails.md``.

Put it after ``auth`` (it reads the caller's key and team) and before ``cache`` (so that a
cached answer is checked too, and a blocked input is never looked up).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.guardrails.checks import build_checks
from proxy.guardrails.clients import Clients
from proxy.guardrails.engine import Guardrails
from proxy.guardrails.selection import Selection, without_body_field
from proxy.runtime.plugins import PluginContext


class GuardrailsOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    default: list[str] = msgspec.field(default_factory=list)
    teams: dict[str, list[str]] = msgspec.field(default_factory=dict)
    keys: dict[str, list[str]] = msgspec.field(default_factory=dict)
    stream_window: Annotated[int, Meta(ge=16, le=4096)] = 128


class GuardrailsPlugin:
    """See the module docstring. Raises ValueError at load for a list naming an undefined
    check, or a check that cannot be built."""

    Options = GuardrailsOptions

    def __init__(self, options: GuardrailsOptions, context: PluginContext) -> None:
        self._clients = Clients()
        checks = build_checks(context.guardrails, context.providers, self._clients)
        self._selection = Selection(checks, options.default, options.teams, options.keys)
        self._guardrails = Guardrails(context.metrics, context.logger, options.stream_window)

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Run the request's checks around ``next`` (see :mod:`proxy.guardrails.engine`)."""
        checks = self._selection.choose(call)
        call = without_body_field(call)
        if not checks:
            return await next(call)
        return await self._guardrails.guard(call, checks, next)

    def span_attributes(self, call: Call) -> dict[str, list[str]]:
        """``crossway.guardrails`` on the plugin's span when tracing is on: the verdicts made by
        the time its link returned, ``<check>:<phase>:<verdict>`` each, in order (a streamed
        answer's output verdicts come after: the ledger record and the metrics have them)."""
        verdicts = call.accounting.guardrails
        if not verdicts:
            return {}
        return {
            "crossway.guardrails": [
                f"{verdict['check']}:{verdict['phase']}:{verdict['verdict']}"
                for verdict in verdicts
            ]
        }

    async def close(self) -> None:
        """Close the webhooks' and moderation providers' connections."""
        await self._clients.close()
