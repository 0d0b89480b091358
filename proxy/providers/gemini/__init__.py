"""Google's Gemini API: the provider, request building, stream decoding and embeddings."""
