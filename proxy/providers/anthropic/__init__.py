"""Anthropic's Messages API: the provider, its request building and its stream decoding."""
