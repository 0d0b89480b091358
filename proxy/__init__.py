"""Crossway: a fast, small, safe LLM gateway."""

__version__ = "0.1.0"
