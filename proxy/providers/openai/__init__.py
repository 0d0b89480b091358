"""OpenAI and every OpenAI-compatible upstream: the chat/completions provider and embeddings."""
