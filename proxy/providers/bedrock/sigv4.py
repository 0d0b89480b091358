"""AWS Signature Version 4: sign one HTTP request with an access key, for the Bedrock provider.

A pure function of its inputs (the clock is a parameter), following AWS's published algorithm:
canonical request → string to sign → HMAC chain of date, region, service → ``Authorization``.
It covers what a JSON API call needs: any method, a path (which, as for every service but S3, is
URI-encoded once more in the canonical request, so ``%3A`` is signed as ``%253A``), a query
string, the headers the caller chooses to sign (``host`` and ``x-amz-date`` are always signed),
and the SHA-256 of the body. Temporary credentials add a signed ``x-amz-security-token``.

Secrets never leave this module except inside the derived signature.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import NamedTuple
from urllib.parse import quote, unquote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Credentials(NamedTuple):
    """An AWS access key; ``session_token`` is set for temporary (STS) credentials."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


def sign_headers(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    credentials: Credentials,
    region: str,
    service: str,
    now: datetime,
) -> dict[str, str]:
    """The headers to send for this request: ``headers`` plus the SigV4 ones.

    Every header in ``headers`` is signed (send exactly these values, or the signature breaks);
    the result adds ``x-amz-date``, ``x-amz-security-token`` (temporary credentials) and
    ``authorization``. ``url`` must be the exact URL that will be requested, already
    percent-encoded. ``now`` is the signing time (AWS rejects a request more than five
    minutes off its clock).
    """
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    signed = {name.lower(): value for name, value in headers.items()}
    signed["x-amz-date"] = stamp
    if credentials.session_token:
        signed["x-amz-security-token"] = credentials.session_token
    parts = urlsplit(url)
    signed.setdefault("host", _host(parts.scheme, parts.hostname or "", parts.port))
    request, signed_names = canonical_request(method, parts.path, parts.query, signed, body)
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = f"{ALGORITHM}\n{stamp}\n{scope}\n{_sha256(request.encode())}"
    key = signing_key(credentials.secret_access_key, stamp[:8], region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    result = dict(headers)
    result["x-amz-date"] = stamp
    if credentials.session_token:
        result["x-amz-security-token"] = credentials.session_token
    result["authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={signed_names}, Signature={signature}"
    )
    return result


def canonical_request(
    method: str, path: str, query: str, headers: Mapping[str, str], body: bytes
) -> tuple[str, str]:
    """The canonical request text and the ``;``-joined signed header names.

    ``headers`` must have lower-case names; values are trimmed and inner runs of spaces
    collapsed, as the algorithm requires.
    """
    names = sorted(headers)
    canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in names)
    signed_names = ";".join(names)
    text = "\n".join(
        (
            method.upper(),
            _canonical_path(path),
            _canonical_query(query),
            canonical_headers,
            signed_names,
            _sha256(body),
        )
    )
    return text, signed_names


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The derived key for ``date`` (``YYYYMMDD``), region and service."""
    key = _hmac(("AWS4" + secret).encode(), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def _canonical_path(path: str) -> str:
    """Normalise dot segments and duplicate slashes, then URI-encode each segment once more."""
    if not path:
        return "/"
    normalised = posixpath.normpath(path)
    if path.endswith("/") and normalised != "/":
        normalised += "/"
    normalised = "/" + normalised.lstrip("/")
    return quote(normalised, safe="/~")


def _canonical_query(query: str) -> str:
    """Parameters sorted by name then value, each name and value RFC 3986 encoded."""
    if not query:
        return ""
    pairs = []
    for item in query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((_encode(unquote(name)), _encode(unquote(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def _host(scheme: str, hostname: str, port: int | None) -> str:
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return hostname
    return f"{hostname}:{port}"


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
