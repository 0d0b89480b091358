"""Hypothesis strategies for what schemas never generate, and a JSON writer that can send it.

Schemathesis draws requests from OpenAPI schemas; these twist them (tests/e2e/test_schemathesis.py):
integers beyond 64 bits, numbers a double cannot hold written in the JSON text (``1e400``),
lone UTF-16 surrogates as ``\\u`` escapes, non-ASCII and control characters in strings, query
parameters, path segments and header values, bodies in other encodings or compressed. Every
strategy is bounded in size.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st


class Verbatim(str):
    """JSON text written as it is: a number no Python float holds, an escape no ``str`` does."""


ODD_CHARACTERS = (
    "\x00\x01\x07\x08\t\n\x0b\x0c\r\x1b\x1f\x7f\x80\x85\x9f\xa0\xad"  # C0, DEL, C1, NBSP, SHY
    "\u00e9\u0301\u0130\u200b\u200d\u200e\u202e\u2028\u2029\ufeff\ufffd\uffff"
    "ключ漢字\U0001f600\U0010ffff"
    "\"\\/<>&%'`{}[]:,=?#+ "
)
odd_text = st.one_of(
    st.text(alphabet=st.sampled_from(ODD_CHARACTERS), min_size=1, max_size=24),
    st.text(min_size=1, max_size=24),  # any code point but surrogates
)
huge_int = st.one_of(
    st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 2**70, -(2**70)]),
    st.integers(min_value=2**64, max_value=2**256),
    st.integers(min_value=-(2**256), max_value=-(2**63) - 1),
)
spelled_number = st.sampled_from(
    ["1e400", "-1e400", "1E+309", "1e-400", "-0.0", "1.7976931348623157e308", "5e-324",
     "123456789012345678901234567890.5", "0.1e1000000", "1180591620717411303424.0"]
).map(Verbatim)  # fmt: skip
lone_surrogate = st.sampled_from(['"\\ud800"', '"x\\udfff"', '"\\ud83d\\u0041"']).map(Verbatim)
odd_value = st.one_of(
    huge_int,
    spelled_number,
    odd_text,
    lone_surrogate,
    st.lists(st.one_of(huge_int, spelled_number, odd_text), max_size=3),
    st.dictionaries(odd_text, st.one_of(huge_int, spelled_number), max_size=2),
)
odd_moment = st.sampled_from(
    ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "9999-12-31", "0001-01-01",
     "1969-12-31T23:59:59Z", "2026-02-30", "2026-12-01T25:00:00Z", "2026-12-01T00:00:00+99:00",
     "+002026-12-01", "2026-W49-1", "20261201"]
)  # fmt: skip
odd_query_value = st.one_of(
    odd_text, odd_moment, huge_int.map(str), spelled_number.map(str), st.just("")
)
odd_header_value = st.one_of(
    odd_text.map(lambda text: text.encode("utf-8")),
    st.binary(min_size=1, max_size=24),
    huge_int.map(lambda number: str(number).encode()),
).map(lambda value: value.replace(b"\r", b"").replace(b"\n", b"") or b"x")
HEADERS_READ = (
    "x-request-id", "anthropic-version", "anthropic-beta", "cache-control",
    "x-crossway-cache-ttl", "origin", "access-control-request-method", "if-none-match",
    "x-trace-id", "content-type", "accept", "accept-encoding", "user-agent", "x-api-key",
    "api-key", "x-bf-vk", "authorization",
)  # fmt: skip
KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-bf-vk")
FIELD_NAMES = (
    "model", "seed", "top_k", "temperature", "max_tokens", "n", "user", "metadata", "stop",
    "logit_bias", "response_format", "tool_choice", "messages", "input", "prompt", "dimensions",
    "expires_at", "rpm", "tpm", "budget", "duration", "rpm_limit", "max_budget", "key", "keys",
    "id", "vendor_field",
)  # fmt: skip


def json_text(value: Any, *, ascii_only: bool) -> str:
    """``value`` as JSON text: integers of any size, :class:`Verbatim` as written, strings
    raw or escaped to ASCII."""
    if isinstance(value, Verbatim):
        return str(value)
    if value is None or isinstance(value, (bool, float)):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii_only)
    if isinstance(value, dict):
        items = (
            f"{json_text(str(k), ascii_only=ascii_only)}:{json_text(v, ascii_only=ascii_only)}"
            for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    return "[" + ",".join(json_text(item, ascii_only=ascii_only) for item in value) + "]"


def node_paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 200) -> Iterator[tuple]:
    """The paths (keys and indices) of every node under ``value``, at most ``limit``."""
    stack = [(prefix, value)]
    while stack and limit > 0:
        path, node = stack.pop()
        limit -= 1
        if path:
            yield path
        if isinstance(node, dict):
            stack += [((*path, key), child) for key, child in node.items()]
        elif isinstance(node, list):
            stack += [((*path, index), child) for index, child in enumerate(node)]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced by ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = replaced(copy[head], rest, new)
    return copy


@st.composite
def twisted_body(draw: st.DrawFn, body: Any) -> Any:
    """``body`` with one node, or one top-level field, replaced by an odd value."""
    value = draw(odd_value)
    paths = list(node_paths(body))
    if isinstance(body, dict) and (not paths or draw(st.booleans())):
        return {**body, draw(st.sampled_from(FIELD_NAMES)): value}
    if not paths:
        return value
    return replaced(body, draw(st.sampled_from(paths)), value)


ENCODINGS = ("utf-8", "utf-8-sig", "utf-16", "gzip", "deflate-claimed", "br-claimed")


def encoded(text: str, encoding: str) -> tuple[bytes, dict[str, str]]:
    """``text`` as body bytes in ``encoding``, with the headers that say so (a ``-claimed``
    encoding is announced in ``Content-Encoding`` but not applied)."""
    if encoding == "gzip":
        return gzip.compress(text.encode("utf-8", "surrogatepass")), {"content-encoding": "gzip"}
    if encoding.endswith("-claimed"):
        return text.encode("utf-8"), {"content-encoding": encoding.removesuffix("-claimed")}
    charset = {"content-type": f"application/json; charset={encoding}"}
    return text.encode(encoding, "surrogatepass"), charset if encoding != "utf-8" else {}


def path_segment(text: str) -> str:
    """``text`` percent-encoded as one path segment (UTF-8, as clients send it)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")
