"""Importing other gateways' configs: ``crossway import litellm`` (:mod:`proxy.admin.migrate.cli`).

The translation is pure — a foreign config tree in, a Crossway config tree and the list of what
could not be translated out (:mod:`proxy.admin.migrate.result`) — so that it can be tested without
files or a server; the command line writes the tree and validates it as ``crossway check`` does.
"""
