"""The gateway's common language and contracts: canonical calls and replies, the plugin
contract, the stream contract and its end hooks, errors, SSE framing, metrics, logs and redaction.

Imports nothing else of the gateway (enforced by import-linter): every other room builds on it.
"""
