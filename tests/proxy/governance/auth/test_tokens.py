"""proxy/governance/auth/tokens.py: minted keys, their hash, and keys read from client headers."""

from __future__ import annotations

import hashlib

import pytest
from multidict import CIMultiDict

from proxy.core.redact import Redactor
from proxy.governance.auth.tokens import (
    MalformedKey,
    checked_key,
    hash_key,
    is_key_text,
    key_from_headers,
    mint_key,
    shown_prefix,
)


def test_minted_keys_are_long_random_and_base62():
    keys = {mint_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("sk-cw-")
        assert len(key) == 6 + 43
        assert key[6:].isalnum()
        assert key.isascii()


def test_the_hash_is_sha256_hex():
    assert hash_key("sk-cw-abc") == hashlib.sha256(b"sk-cw-abc").hexdigest()
    assert shown_prefix("sk-cw-abcdefgh") == "sk-cw-abcd"


def test_the_redactor_knows_the_key_shape():
    key = mint_key()
    assert key not in Redactor().text(f"failed for {key} and Bearer {key}")


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"Authorization": "Bearer sk-cw-one"}, "sk-cw-one"),
        ({"authorization": "bearer  sk-cw-one "}, "sk-cw-one"),
        ({"x-api-key": "sk-cw-two"}, "sk-cw-two"),
        ({"api-key": "sk-cw-three"}, "sk-cw-three"),
        ({"x-bf-vk": "sk-cw-four", "Authorization": "Bearer sk-provider"}, "sk-cw-four"),
        ({"Authorization": "Bearer sk-cw-one", "x-api-key": "sk-cw-two"}, "sk-cw-one"),
        ({"content-type": "application/json"}, None),
    ],
)
def test_the_key_comes_from_the_first_key_header(headers: dict[str, str], key: str | None):
    assert key_from_headers(CIMultiDict(headers)) == key


@pytest.mark.parametrize(
    "value",
    [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        "Bearer sk-cw-\udcff\udcfe",  # invalid UTF-8 as aiohttp hands it over
        "Bearer sk-cw-ä",
        "Bearer " + "A" * 10_000,
        "Bearer a b",
        "Bearer a\tb",
    ],
)
def test_unusable_values_are_malformed(value: str):
    with pytest.raises(MalformedKey):
        key_from_headers(CIMultiDict({"Authorization": value}))


@pytest.mark.parametrize(
    ("value", "usable"),
    [
        ("sk-cw-abc", True),
        ("k" * 512, True),
        ("k" * 513, False),
        ("", False),
        ("ключ", False),
        ("sk-cw-\udcff", False),
        ("sk cw", False),
        ("sk-\x7f", False),
        ("sk-\x00", False),
    ],
)
def test_one_validation_for_every_key_a_client_names(value: str, usable: bool):
    """The headers' check and checked_key (the LiteLLM routes' key names) are the same."""
    assert is_key_text(value) is usable
    if usable:
        assert checked_key(value, "key") == value
        assert key_from_headers(CIMultiDict({"x-api-key": value})) == value
        return
    with pytest.raises(MalformedKey) as raised:
        checked_key(value, "key query parameter")
    assert str(raised.value) == "the key query parameter does not hold a key"
    assert value not in str(raised.value) or not value
