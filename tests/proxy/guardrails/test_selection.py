"""Which checks a request runs: mandatory lists by default, team, key and the key's records;
what a request adds by body field or header; what it may not drop; orq's pii_redaction."""

from __future__ import annotations

import msgspec
import pytest

from proxy.core.canonical import ANONYMOUS, Call, GatewayOptions, Message, Principal
from proxy.core.errors import BadRequest, PermissionDenied
from proxy.guardrails.checks import Check, PiiRedaction, build_checks
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import parse_checks
from proxy.guardrails.selection import Selection, without_body_field

NAMES = ("base", "team-check", "alias-check", "id-check", "record-check", "extra", "other")


def selection() -> Selection:
    section = {name: {"type": "keywords", "words": [name]} for name in NAMES}
    checks = build_checks(parse_checks(section, "$", []), {}, Clients())
    return Selection(
        checks,
        ["base"],
        {"support": ["team-check"]},
        {"bot": ["alias-check"], "key_1": ["id-check", "base"]},
    )


def call(principal: Principal = ANONYMOUS, **fields: object) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        principal=principal,
        **fields,  # type: ignore[arg-type]
    )


def names(checks: list[Check]) -> list[str]:
    return [check.name for check in checks]


AGENT = Principal(key_id="key_1", key_alias="bot", team="support", guardrails=("record-check",))


def test_mandatory_lists_in_order_once_each() -> None:
    assert names(selection().choose(call())) == ["base"]
    assert names(selection().choose(call(AGENT))) == [
        "base",
        "team-check",
        "alias-check",
        "id-check",
        "record-check",
    ]


def test_a_request_adds_by_body_and_header() -> None:
    request = call(
        extra={"guardrails": msgspec.Raw(b'["extra", "base"]')},
        client_headers={"x-crossway-guardrails": " other , extra"},
    )
    assert names(selection().choose(request)) == ["base", "extra", "other"]
    onward = without_body_field(request)
    assert "guardrails" not in onward.extra  # never sent upstream
    assert "guardrails" in request.extra  # a retry from outside asks for them again
    assert without_body_field(onward) is onward


def test_a_request_cannot_drop_a_mandatory_check() -> None:
    with pytest.raises(PermissionDenied) as denied:
        selection().choose(call(AGENT, client_headers={"x-crossway-guardrails": "-team-check"}))
    assert denied.value.code == "guardrail_mandatory"
    assert denied.value.status == 403
    # dropping one that is not mandatory means nothing
    assert names(selection().choose(call(extra={"guardrails": msgspec.Raw(b'["!other"]')}))) == [
        "base"
    ]


def test_unknown_names_and_bad_fields() -> None:
    with pytest.raises(BadRequest) as unknown:
        selection().choose(call(extra={"guardrails": msgspec.Raw(b'["base", "nope"]')}))
    assert (unknown.value.code, unknown.value.param) == ("guardrail_unknown", "guardrails[1]")
    with pytest.raises(BadRequest, match="a list of guardrail names"):
        selection().choose(call(extra={"guardrails": msgspec.Raw(b'"base"')}))
    broken = Principal(key_id="k", guardrails=("deleted-check",))
    with pytest.raises(PermissionDenied) as refused:
        selection().choose(call(broken))
    assert refused.value.code == "guardrail_unknown"


def test_lists_naming_undefined_checks_are_refused_at_load() -> None:
    with pytest.raises(ValueError, match=r"teams\.support: no check 'ghost'"):
        Selection({}, [], {"support": ["ghost"]}, {})


def test_orq_pii_redaction_entries() -> None:
    entries = [{"id": "pii_redaction", "entities": ["EMAIL_ADDRESS", "ip_address"]}]
    chosen = selection().choose(call(options=GatewayOptions(pii=entries)))
    assert names(chosen) == ["base", "pii_redaction"]
    assert isinstance(chosen[1], PiiRedaction)
    unsupported = [{"id": "pii_redaction", "entities": ["PERSON"], "on_failure": "block"}]
    with pytest.raises(BadRequest) as caught:
        selection().choose(call(options=GatewayOptions(pii=unsupported)))
    assert caught.value.code == "pii_entity_unsupported"
    passthrough = [{"id": "pii_redaction", "entities": ["PERSON"], "on_failure": "passthrough"}]
    assert names(selection().choose(call(options=GatewayOptions(pii=passthrough)))) == ["base"]
