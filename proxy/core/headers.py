"""The ``x-crossway-*`` headers the plugins put on a reply and the app reads back: one
vocabulary, so that a reader (LiteLLM's compatibility headers, :mod:`proxy.http.compat_headers`)
never imports the plugin that writes one."""

COST_HEADER = "x-crossway-cost-usd"
"""What the ``cost`` plugin charged for a whole answer, in US dollars."""

ATTEMPTS_HEADER = "x-crossway-attempts"
"""How many upstream calls the ``retry`` and ``fallback`` plugins made."""

FALLBACK_HEADER = "x-crossway-fallback"
"""The model that served when it was not the one asked for (the ``fallback`` plugin)."""

TRACE_ID_HEADER = "x-crossway-trace-id"
"""The request's trace id (32 hex digits) on every answer of a dialect route, when tracing is on
(:mod:`proxy.core.tracing`)."""
GUARDRAILS_HEADER = "x-crossway-guardrails"
"""On a request, guardrail checks it adds by name (comma-separated); on a reply, the checks that
warned (``warned=<names>``): the ``guardrails`` plugin."""

SERVER_NAME = "crossway"
"""The ``Server`` header of every answer: the product, no version (instead of aiohttp's banner)."""

OVERHEAD_HEADER = "x-crossway-overhead-ms"
"""The gateway's own time on a request, in milliseconds: the time since it arrived minus the time
spent waiting on upstreams (what ``crossway_gateway_overhead_seconds`` measures). On a streamed
answer it is the overhead until the headers went out (the first chunk's wait excluded)."""
