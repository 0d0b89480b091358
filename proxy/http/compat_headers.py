"""LiteLLM's response headers, for clients written against LiteLLM's proxy
(``compat: {litellm: true}``, the default; follows config reloads). The app adds them to the
reply the chain returned (:attr:`proxy.runtime.snapshot.Snapshot.litellm_headers`).

Every reply of a dialect route also carries:

- ``x-litellm-response-cost``: the cost the ``cost`` plugin charged (``x-crossway-cost-usd``,
  whole responses only: a stream is charged when it ends, after its headers left);
- ``x-litellm-model-id``: the deployment that served, ``provider/model`` (the ``id`` that
  ``GET /model/info`` lists);
- ``x-litellm-attempted-fallbacks``: 1 when another model than the one asked for served, else 0
  (Crossway says which in ``x-crossway-fallback``);
- ``x-litellm-attempted-retries``: the upstream calls made beyond the first, less that
  fallback (``x-crossway-attempts`` counts them all).
"""

from __future__ import annotations

from proxy.core.headers import COST_HEADER, FALLBACK_HEADER
from proxy.core.reply import Reply

COST = "x-litellm-response-cost"
MODEL_ID = "x-litellm-model-id"
RETRIES = "x-litellm-attempted-retries"
FALLBACKS = "x-litellm-attempted-fallbacks"


def add_litellm_headers(reply: Reply) -> None:
    """Add LiteLLM's headers to ``reply`` from what the gateway knows of it."""
    headers = reply.headers
    cost = headers.get(COST_HEADER)
    if cost is not None:
        headers[COST] = cost
    headers[MODEL_ID] = f"{reply.provider}/{reply.model}"
    fallbacks = 1 if FALLBACK_HEADER in headers else 0
    headers[FALLBACKS] = str(fallbacks)
    headers[RETRIES] = str(max(0, reply.attempts - 1 - fallbacks))
