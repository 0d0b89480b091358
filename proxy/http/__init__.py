"""The HTTP surface of the dialects: the route pipeline (read bounded, authenticate, decode, run
the chain, answer whole or streamed), the answers, the side routes (models, metrics, health,
counting tokens), the edges every route shares (request ids, CORS, route metrics, error bodies)
and the bounded stop.
"""
