"""Calling providers: the model router, the upstream call (deployment choice, clocks, stream
priming, error sanitising), the provider stream under its clocks, the HTTP transport and bounded
body reading.
"""
