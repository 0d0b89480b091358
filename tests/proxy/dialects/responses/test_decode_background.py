"""``background: true`` is decoded into the envelope (the route runs it in the background); with
``store: false`` it is a 400 naming ``store``, since a background response must be stored."""

from __future__ import annotations

import json

import pytest

from proxy.core.errors import BadRequest
from proxy.dialects.responses import ResponsesDialect, envelope_of

DIALECT = ResponsesDialect()


def decode(**fields: object) -> object:
    body = json.dumps({"model": "mock/echo", "input": "hi", **fields}).encode()
    return DIALECT.decode(body, {}, "req-1", 0.0)


def test_background_is_kept_in_the_envelope() -> None:
    call = DIALECT.decode(b'{"input": "hi", "background": true}', {}, "req-1", 0.0)
    assert envelope_of(call).background is True
    assert envelope_of(call).store is True


def test_background_without_store_is_a_400_naming_store() -> None:
    with pytest.raises(BadRequest) as refused:
        decode(background=True, store=False)
    assert refused.value.param == "store"
