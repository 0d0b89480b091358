"""Shared fixtures for the unit tests under tests/proxy."""

from __future__ import annotations

import pytest

from proxy.canonical import Call, Message


def make_call(text: str = "hello world", **fields) -> Call:
    """A minimal canonical chat call with one user message."""
    fields.setdefault("request_id", "req-1")
    fields.setdefault("dialect", "openai")
    fields.setdefault("model", "m")
    fields.setdefault("messages", [Message(role="user", content=text)])
    return Call(**fields)


@pytest.fixture
def call() -> Call:
    return make_call()
