"""LiteLLM compatibility for its clients: the ``/key/*``, ``/spend/logs``, ``/model/info`` and
health routes over Crossway's own registry and ledger (``compat.litellm``).
"""
