"""The full plugin chain of issue 36 over a SQLite ledger, as one config file: auth → limits →
masking → cache → cost → fallback → retry → balance, a master key, a declared client key, an
OpenAI-compatible upstream (``up``, a :class:`~tests.e2e.fake_openai.FakeOpenAI`) and the mock.

The ``auth`` section comes after the providers and models and before the plugins, so that the
file cut just before ``auth:`` is valid YAML with no key demanded and no master key."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.e2e.conftest import UPSTREAM_KEY

MASTER_KEY = "master-key-" + "0123456789abcdef" * 2
CLIENT_KEY = "sk-cw-client-" + "0123456789abcdef" * 2
PRICES = "{input: 10, output: 20}"


def full_chain_config(data: Path, upstream_url: str, server: str = "access_log: true") -> str:
    """The config text: its database in ``data``, ``server`` the server section's fields."""
    return textwrap.dedent(
        f"""\
        server: {{{server}}}
        database: {{url: "sqlite:///{data}/crossway.db"}}
        providers:
          up:
            type: openai
            base_url: "{upstream_url}/v1"
            api_key: "{UPSTREAM_KEY}"
            timeouts: {{first_byte: 30, idle: 30, total: 120}}
          mock: {{type: mock}}
        models:
          chat: [{{target: up/gpt-test, prices: {PRICES}}}]
          slow: [{{target: up/slow-stream, prices: {PRICES}}}]
          hang: [{{target: up/hang, prices: {PRICES}}}]
          backup: [{{target: mock/echo}}]
        auth:
          master_key: "{MASTER_KEY}"
          cache_ttl: 0
          keys:
            - {{key: "{CLIENT_KEY}", alias: client}}
        plugins:
          - auth: {{}}
          - limits: {{}}
          - masking: {{entities: {{email: mask}}}}
          - cache: {{}}
          - cost: {{}}
          - fallback: {{chains: {{chat: [backup]}}}}
          - retry: {{retries: 1}}
          - balance: {{strategy: weighted}}
        """
    )
