"""The ``x-crossway-*`` headers the plugins put on a reply and the app reads back: one
vocabulary, so that a reader (LiteLLM's compatibility headers, :mod:`proxy.http.compat_headers`)
never imports the plugin that writes one."""

COST_HEADER = "x-crossway-cost-usd"
"""What the ``cost`` plugin charged for a whole answer, in US dollars."""

ATTEMPTS_HEADER = "x-crossway-attempts"
"""How many upstream calls the ``retry`` and ``fallback`` plugins made."""

FALLBACK_HEADER = "x-crossway-fallback"
"""The model that served when it was not the one asked for (the ``fallback`` plugin)."""

GUARDRAILS_HEADER = "x-crossway-guardrails"
"""On a request, guardrail checks it adds by name (comma-separated); on a reply, the checks that
warned (``warned=<names>``): the ``guardrails`` plugin."""

SERVER_NAME = "crossway"
"""The ``Server`` header of every answer: the product, no version (instead of aiohttp's banner)."""
