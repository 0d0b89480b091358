"""proxy/governance/ledger/records.py: the record's end user comes from the request (OpenAI
``user``, orq ``identity.id``) before the key's own user, and is None when nothing names one; long
names are bounded."""

from __future__ import annotations

import time

import pytest

from proxy.core.canonical import Call, GatewayOptions, Message, Params, Principal
from proxy.core.plugin import FinishedRequest
from proxy.governance.ledger.records import spend_record


def finished(call: Call) -> FinishedRequest:
    return FinishedRequest(
        request_id="r", dialect="openai", call=call, principal=call.principal, status=200,
        provider="p", upstream_model="m", usage=None, error_code=None, duration=0.0015,
        ended_at=time.time(), attempts=1,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("user", "metadata", "key_user", "recorded"),
    [
        ("ann", None, "svc", "ann"),
        (None, {"identity": {"id": "c-1"}}, "svc", "c-1"),
        (None, {"thread": {"id": "t"}}, "svc", "svc"),
        (None, None, "svc", "svc"),
        (None, None, None, None),
        ("", None, None, None),
        ("x" * 300, None, None, "x" * 256),
    ],
)
def test_the_end_user_is_the_one_the_request_names_else_the_keys(
    user: str | None, metadata: dict | None, key_user: str | None, recorded: str | None
) -> None:
    call = Call(
        request_id="r",
        dialect="openai",
        model="alias",
        messages=[Message("user", "hi")],
        params=Params(user=user),
        options=GatewayOptions(metadata=metadata),
    )
    call.principal = Principal(key_id="k", user=key_user)
    record = spend_record(finished(call), "id-1")
    assert record.user == recorded
    assert (record.key_id, record.model, record.duration_ms) == ("k", "alias", 1.5)
