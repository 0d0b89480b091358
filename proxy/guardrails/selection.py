"""Which checks one request runs: the mandatory ones of its key and team, and those it adds.

Mandatory, in this order, once each: ``default``; ``teams[<the key's team>]``;
``keys[<the key's alias>]`` and ``keys[<the key's id>]``; the key's and its team's own lists
(their records' ``metadata.guardrails``, set through the admin API or the config's
``auth.keys`` / ``auth.teams``: :attr:`~proxy.core.canonical.Principal.guardrails`).

A request adds checks by name, never removes one: the body field ``guardrails: [names]``
(:func:`without_body_field` leaves it out of what goes on: the upstream never sees it; dialects
that pass unknown fields on carry it) or
the header ``x-crossway-guardrails: name, name``. A name the config does not define is a 400
``guardrail_unknown``; ``-name`` or ``!name`` (asking to drop one) is a 403
``guardrail_mandatory`` when the name is mandatory for the request, and means nothing
otherwise. A key or team list naming a check the config does not define fails closed: 403
``guardrail_unknown`` (an operator's mistake must not run a key without its policy).

orq's per-request ``plugins: [{id: pii_redaction, entities, on_failure}]`` (``call.options.pii``)
map onto an input check that redacts those entities (``<EMAIL_ADDRESS>``) before the call goes on
(:class:`~proxy.guardrails.checks.PiiRedaction`); an entity the gateway cannot detect is a 400
``pii_entity_unsupported`` unless the entry says ``on_failure: passthrough``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.core.canonical import Call
from proxy.core.errors import BadRequest, PermissionDenied
from proxy.core.headers import GUARDRAILS_HEADER
from proxy.guardrails.checks import Check, PiiRedaction
from proxy.pii.labels import PRESIDIO_LABELS, REQUEST_NAMES

BODY_FIELD = "guardrails"

_NAMES = msgspec.json.Decoder(list[str])


class Selection:
    """The lists of the ``guardrails`` plugin's options over the config's ``checks``; raises
    ValueError at construction for a list naming a check the config does not define."""

    def __init__(
        self,
        checks: Mapping[str, Check],
        default: Sequence[str],
        teams: Mapping[str, Sequence[str]],
        keys: Mapping[str, Sequence[str]],
    ) -> None:
        for where, names in [
            ("default", default),
            *((f"teams.{team}", names) for team, names in teams.items()),
            *((f"keys.{key}", names) for key, names in keys.items()),
        ]:
            for name in names:
                if name not in checks:
                    defined = ", ".join(sorted(checks)) or "none"
                    raise ValueError(
                        f"{where}: no check {name!r} in the guardrails section (defined: {defined})"
                    )
        self._checks = checks
        self._default = tuple(default)
        self._teams = {team: tuple(names) for team, names in teams.items()}
        self._keys = {key: tuple(names) for key, names in keys.items()}
        self._redactions: dict[tuple[str, ...], PiiRedaction] = {}

    def choose(self, call: Call) -> list[Check]:
        """The checks ``call`` runs, mandatory first. Raises the errors of the module
        docstring."""
        mandatory = self._mandatory(call)
        asked = _asked(call)
        names = list(mandatory)
        for index, name in enumerate(asked):
            if name[:1] in ("-", "!"):
                if name[1:].strip() in mandatory:
                    raise PermissionDenied(
                        f"the guardrail {name[1:].strip()!r} is mandatory for this key: a request"
                        " may add guardrails, never remove them",
                        param=f"guardrails[{index}]",
                        code="guardrail_mandatory",
                    )
                continue
            if name not in self._checks:
                raise BadRequest(
                    f"no guardrail named {name!r} (defined: {', '.join(sorted(self._checks))})",
                    param=f"guardrails[{index}]",
                    code="guardrail_unknown",
                )
            if name not in names:
                names.append(name)
        chosen = [self._checks[name] for name in names]
        if call.options.pii:
            chosen += self._redactions_of(call.options.pii)
        return chosen

    def _mandatory(self, call: Call) -> list[str]:
        principal = call.principal
        names = list(self._default)
        lists: list[Sequence[str]] = []
        if principal.team is not None:
            lists.append(self._teams.get(principal.team, ()))
        for key in (principal.key_alias, principal.key_id):
            if key is not None:
                lists.append(self._keys.get(key, ()))
        lists.append(principal.guardrails)
        for listed in lists:
            for name in listed:
                if name not in names:
                    names.append(name)
        for name in principal.guardrails:
            if name not in self._checks:
                raise PermissionDenied(
                    f"this key's guardrail {name!r} is not defined in the gateway's config, so"
                    " the request is refused",
                    code="guardrail_unknown",
                )
        return names

    def _redactions_of(self, entries: list[dict[str, Any]]) -> list[Check]:
        checks: list[Check] = []
        for position, entry in enumerate(entries):
            blocks = entry.get("on_failure", "block") != "passthrough"
            listed = entry.get("entities")
            entities: list[str] = []
            for index, name in enumerate(list(PRESIDIO_LABELS) if listed is None else listed):
                entity = REQUEST_NAMES.get(str(name).lower())
                if entity is None:
                    if blocks:
                        field = f"plugins[{position}].entities[{index}]"
                        raise BadRequest(
                            f"{field}: {name!r} is not an entity this gateway detects",
                            param=field,
                            code="pii_entity_unsupported",
                        )
                    continue
                if entity not in entities:
                    entities.append(entity)
            if not entities:
                continue
            key = tuple(sorted(entities))
            check = self._redactions.get(key)
            if check is None:
                check = self._redactions[key] = PiiRedaction(list(key))
            checks.append(check)
        return checks


def without_body_field(call: Call) -> Call:
    """``call`` as the rest of the chain gets it: a copy without the body field when it has one
    (the upstream never sees it; the original keeps it, for a retry from outside this link)."""
    if BODY_FIELD not in call.extra:
        return call
    extra = {name: value for name, value in call.extra.items() if name != BODY_FIELD}
    return msgspec.structs.replace(call, extra=extra)


def _asked(call: Call) -> list[str]:
    """The names the request itself asks for: the body field's, then the header's."""
    names: list[str] = []
    raw = call.extra.get(BODY_FIELD)
    if raw is not None:
        try:
            names += _NAMES.decode(raw)
        except msgspec.DecodeError:
            raise BadRequest(
                "guardrails must be a list of guardrail names", param="guardrails"
            ) from None
    header = call.client_headers.get(GUARDRAILS_HEADER)
    if header:
        names += [name.strip() for name in header.split(",") if name.strip()]
    return names
