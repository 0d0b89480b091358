"""Shared state: the ``Store`` contract the plugins keep counters, buckets and holds in, the
in-process store, and the Redis (and Redis Cluster) store with its breaker and policy.
"""
