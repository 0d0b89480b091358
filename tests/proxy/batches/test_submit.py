"""Reading a batch input file: each line's custom id and body, or every problem with its line."""

from __future__ import annotations

import json

import msgspec

from proxy.batches.submit import read_lines

URL = "/v1/chat/completions"


def line(custom_id: str, url: str = URL, method: str = "POST") -> bytes:
    body = {"custom_id": custom_id, "method": method, "url": url, "body": {"model": "m"}}
    return json.dumps(body).encode()


def test_good_lines_are_read_in_order_and_blank_lines_skipped() -> None:
    lines, errors = read_lines(line("a") + b"\n\n" + line("b") + b"\n", URL, 10)
    assert errors == []
    assert [(c, msgspec.json.decode(b)) for c, b in lines] == [
        ("a", {"model": "m"}),
        ("b", {"model": "m"}),
    ]


def test_every_problem_is_named_with_its_line() -> None:
    content = b"\n".join(
        [
            line("a"),
            b"not json",
            line("b", method="GET"),
            line("c", url="/v1/embeddings"),
            line("a"),
        ]
    )
    _, errors = read_lines(content, URL, 10)
    assert [(e.code, e.line) for e in errors] == [
        ("invalid_json_line", 2),
        ("invalid_method", 3),
        ("mismatched_url", 4),
        ("duplicate_custom_id", 5),
    ]


def test_an_empty_file_and_one_past_the_bound_are_one_error_each() -> None:
    assert [e.code for e in read_lines(b"\n \n", URL, 10)[1]] == ["empty_file"]
    lines, errors = read_lines(b"\n".join(line(str(n)) for n in range(3)), URL, 2)
    assert lines == []
    assert [(e.code, e.line) for e in errors] == [("too_many_lines", None)]
