"""A gateway config for the Fabro and Anthropic end-to-end tests: the fake OpenAI upstream as the
first provider (``default_model: gpt-test``, so a Fabro request without a model goes there), the
mock provider (``default_model: echo``), a mock that streams slowly (keep-alive tests), and the
aliases the tests address (``chat``, and ``claude-opus-4-6`` for the Anthropic spec's example)."""

from __future__ import annotations

from tests.e2e.conftest import UPSTREAM_KEY


def dialect_config(upstream_url: str) -> str:
    """The YAML config for a gateway in front of the fake upstream at ``upstream_url``."""
    return f"""\
server: {{access_log: false}}
providers:
  up:
    type: openai
    base_url: "{upstream_url}/v1"
    api_key: "{UPSTREAM_KEY}"
    default_model: gpt-test
    timeouts: {{first_byte: 2, idle: 1, total: 8}}
  mock: {{type: mock, default_model: echo, faults: true}}
  paced: {{type: mock, tokens_per_second: 10}}
models:
  chat: [{{target: up/gpt-test}}]
  claude-opus-4-6: [{{target: up/gpt-test}}]
"""
