"""Every use of aiohttp's internals, and nothing else: the gateway's server connection handler
and runner, the fixed-path route shortcut, flow control, the whole answer written in one call, the
upstream body reader and connection.

aiohttp is pinned to its tested minor line (pyproject.toml) because of this package; a test checks
that no other module reaches into aiohttp's private attributes or modules.
"""
