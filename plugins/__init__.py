"""Crossway's built-in plugins, one module each, loadable by name from the YAML ``plugins:`` list
(the names are :data:`proxy.runtime.plugins.BUILTINS`). Each is a thin adapter over its concern's
room of :mod:`proxy`; the gateway itself never imports this package.
"""
