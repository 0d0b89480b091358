"""Crossway benchmark harness.

Run ``python -m bench`` from the repository root; see ``bench/README.md``.
"""
