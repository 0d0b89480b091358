"""The plugin contract and the chain runner.

A plugin is one link of the chain: an object with ``async __call__(call, next) -> Reply``. It may
change the call, answer without calling ``next`` (a cache hit, a refusal), call ``next`` several
times (retry, fallback), or wrap the reply — for a stream, by returning a Reply whose ``stream``
wraps the inner one. Links run in YAML order, the first entry outermost; the innermost ``next``
is the upstream call. An empty chain *is* the upstream call: it costs nothing.

A plugin class may declare ``Options``, a msgspec Struct (``forbid_unknown_fields=True``
recommended) that its YAML options are validated against at load; it is then built as
``cls(options)``, otherwise as ``cls()`` and any option is an error. It may define
``async def close()``, awaited when the runtime snapshot that owns it is retired.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from proxy.canonical import Call, Reply
from proxy.config import PluginSpec

Next = Callable[[Call], Awaitable[Reply]]


@runtime_checkable
class Plugin(Protocol):
    """One link of the chain. Raising a :class:`proxy.errors.GatewayError` answers the client
    with that error; any other exception is a 500 that hides its details."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Handle ``call``, usually by awaiting ``next(call)`` once or more."""
        ...


class PluginLoadError(Exception):
    """A plugin entry cannot be loaded; the message starts with the entry's YAML path."""


def compose(plugins: Sequence[Plugin], upstream: Next) -> Next:
    """The chain as one callable: ``plugins[0]`` outermost, ``upstream`` innermost."""
    chain = upstream
    for plugin in reversed(plugins):
        chain = functools.partial(plugin, next=chain)
    return chain


def load_plugins(specs: Sequence[PluginSpec], builtins: dict[str, str]) -> list[Plugin]:
    """Instantiate every entry; raises :class:`PluginLoadError` listing each bad one.

    ``builtins`` maps built-in names to ``module:Class`` references; any other reference must
    itself be ``module:Class``.
    """
    plugins: list[Plugin] = []
    errors: list[str] = []
    for spec in specs:
        try:
            plugins.append(_load(spec, builtins))
        except PluginLoadError as exc:
            errors.append(str(exc))
    if errors:
        raise PluginLoadError("\n".join(errors))
    return plugins


def _load(spec: PluginSpec, builtins: dict[str, str]) -> Plugin:
    reference = builtins.get(spec.ref, spec.ref)
    module_name, _, class_name = reference.partition(":")
    if not class_name:
        known = ", ".join(sorted(builtins))
        raise PluginLoadError(
            f"{spec.path}: unknown plugin {spec.ref!r} (built-ins: {known}; "
            "a custom plugin is written {plugin: 'module:Class', options: {...}})"
        )
    try:
        cls: Any = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise PluginLoadError(f"{spec.path}: cannot import {reference!r}: {exc}") from None
    options_type = getattr(cls, "Options", None)
    if options_type is None:
        if spec.options:
            raise PluginLoadError(f"{spec.path}: plugin {spec.ref!r} takes no options")
        plugin = cls()
    else:
        try:
            options = msgspec.convert(spec.options, options_type, strict=False)
        except msgspec.ValidationError as exc:
            raise PluginLoadError(f"{spec.path}: {exc}") from None
        try:
            plugin = cls(options)
        except ValueError as exc:
            raise PluginLoadError(f"{spec.path}: {exc}") from None
    if not isinstance(plugin, Plugin):
        raise PluginLoadError(f"{spec.path}: {reference!r} is not a plugin (no async __call__)")
    return plugin
