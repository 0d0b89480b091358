"""The plugin contract at the import path third-party plugins have used: a stable re-export of
:mod:`proxy.core.plugin` (the contract and its optional hooks' protocols),
:mod:`proxy.core.streams` (the reply stream contract) and :mod:`proxy.runtime.plugins` (the
context a plugin may ask for, loading). New code imports those modules (docs/plugins.md).

Old names kept here: ``authenticator`` is :func:`proxy.core.plugin.authentication`.
"""

from proxy.core.plugin import (
    HOOKS,
    Authenticate,
    Authenticates,
    Closes,
    FinishedRequest,
    Finishes,
    Next,
    Plugin,
    Starts,
    anonymous,
    authentication,
    compose,
)
from proxy.core.streams import (
    BatchedStream,
    EndHook,
    EndObservable,
    RelaysFrames,
    ReplyStream,
    batched,
)
from proxy.runtime.plugins import (
    BUILTINS,
    PluginContext,
    PluginLoadError,
    load_plugins,
)

authenticator = authentication
"""The old name of :func:`~proxy.core.plugin.authentication`."""

__all__ = [
    "BUILTINS",
    "HOOKS",
    "Authenticate",
    "Authenticates",
    "BatchedStream",
    "Closes",
    "EndHook",
    "EndObservable",
    "FinishedRequest",
    "Finishes",
    "Next",
    "Plugin",
    "PluginContext",
    "PluginLoadError",
    "RelaysFrames",
    "ReplyStream",
    "Starts",
    "anonymous",
    "authentication",
    "authenticator",
    "batched",
    "compose",
    "load_plugins",
]
