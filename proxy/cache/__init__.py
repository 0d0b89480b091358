"""The response cache's pure parts, wired into the chain by :mod:`plugins.cache`.

- :mod:`~proxy.cache.key`: which requests share an entry (scope, model, what changes an answer).
- :mod:`~proxy.cache.control`: what one request lets the cache do (``Cache-Control``, TTLs).
- :mod:`~proxy.cache.entry`: the stored form of a complete answer, and its checks.
- :mod:`~proxy.cache.assemble` / :mod:`~proxy.cache.replay`: a stream folded into a whole
  answer, and a whole answer told again as a stream (a hit's reply, pre-encoded frames).
- :mod:`~proxy.cache.lru` / :mod:`~proxy.cache.backends`: where entries live.
- :mod:`~proxy.cache.flight`: one upstream call shared by identical requests in flight;
  :mod:`~proxy.cache.coalesce`: the flights of a cache by key, and a joining request's reply.
"""
