"""The offline provider: canned and echoed answers, and deterministic embedding vectors."""
