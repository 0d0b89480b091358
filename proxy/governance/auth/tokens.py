"""Virtual keys as text: minting, hashing, and reading a client's key from its headers.

A minted key is ``sk-cw-`` followed by 43 base62 characters that encode 32 random bytes (256
bits from :mod:`secrets`). Only its SHA-256 is ever stored: for a key with 256 bits of
entropy a preimage search is hopeless, so a slow password hash (bcrypt, scrypt, argon2) would
add milliseconds to every cache miss and no security. Keys declared in the config are chosen
by the operator; they must be at least :data:`MIN_DECLARED_KEY_LENGTH` characters long.

Clients send their key the way their SDK does, and the first of these headers present wins:
``x-bf-vk`` (Bifrost's virtual key header, which a Bifrost client may send beside a provider
key in ``Authorization``), ``Authorization: Bearer …`` (OpenAI SDKs), ``x-api-key`` (Anthropic
SDKs), ``api-key`` (Azure SDKs). A value that is not printable ASCII of at most
:data:`MAX_KEY_LENGTH` characters is refused before it is hashed or looked up: header bytes
that are not UTF-8 reach the application as surrogate escapes, which must never reach an
encoder (a 500) or a query.

:func:`checked_key` is that one validation, and every key a client supplies — in a header, a
query parameter or a body (the LiteLLM routes name keys) — passes it before :func:`hash_key`
sees it; only minted keys and the config's (validated when it loads) are hashed without it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping

PREFIX = "sk-cw-"
MAX_KEY_LENGTH = 512
MIN_DECLARED_KEY_LENGTH = 32
SHOWN_PREFIX_LENGTH = len(PREFIX) + 4  # ``key_prefix`` in records: enough to recognise a key

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_RANDOM_BYTES = 32
_ENCODED_LENGTH = 43  # ceil(256 / log2(62))
KEY_HEADERS = ("x-bf-vk", "authorization", "x-api-key", "api-key")


class MalformedKey(ValueError):
    """A key header is present but its value cannot be a key."""


def mint_key() -> str:
    """A fresh virtual key: ``sk-cw-`` + 32 random bytes in base62."""
    number = int.from_bytes(secrets.token_bytes(_RANDOM_BYTES), "big")
    digits = []
    for _ in range(_ENCODED_LENGTH):
        number, digit = divmod(number, 62)
        digits.append(_ALPHABET[digit])
    return PREFIX + "".join(digits)


def hash_key(key: str) -> str:
    """The stored form of ``key``: SHA-256, hex. ``key`` must be ASCII: a client's key has
    passed :func:`checked_key`."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def is_key_text(value: str) -> bool:
    """Whether ``value`` can be a key: 1 to :data:`MAX_KEY_LENGTH` printable ASCII characters,
    no space."""
    return (
        0 < len(value) <= MAX_KEY_LENGTH
        and value.isascii()
        and value.isprintable()
        and " " not in value
    )


def checked_key(value: str, source: str) -> str:
    """``value`` if it can be a key (:func:`is_key_text`), ready for :func:`hash_key`; raises
    :class:`MalformedKey` naming ``source`` (never quoting the value) otherwise."""
    if not is_key_text(value):
        raise MalformedKey(f"the {source} does not hold a key")
    return value


def shown_prefix(key: str) -> str:
    """The part of ``key`` that records show so that an operator can tell keys apart."""
    return key[:SHOWN_PREFIX_LENGTH]


def key_from_headers(headers: Mapping[str, str]) -> str | None:
    """The key the client sent, or None when it sent none.

    Raises :class:`MalformedKey` when a key header is present but unusable: not printable
    ASCII, longer than :data:`MAX_KEY_LENGTH`, empty, or an ``Authorization`` that is not a
    Bearer token. ``headers`` must look names up case-insensitively (aiohttp's do).
    """
    for name in KEY_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        if name == "authorization":
            scheme, _, value = value.partition(" ")
            if scheme.lower() != "bearer":
                raise MalformedKey("the Authorization header must be 'Bearer <key>'")
        return checked_key(value.strip(), f"{name} header")
    return None
