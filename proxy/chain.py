"""The plugin contract at the import path third-party plugins have used: a stable re-export of
:mod:`proxy.core.plugin` (the contract) and :mod:`proxy.runtime.plugins` (the context a plugin
may ask for, loading). New code imports those modules (docs/plugins.md).
"""

from proxy.core.plugin import (
    Authenticate,
    FinishedRequest,
    Next,
    Plugin,
    anonymous,
    authenticator,
    compose,
)
from proxy.runtime.plugins import (
    BUILTINS,
    PluginContext,
    PluginLoadError,
    load_plugins,
)

__all__ = [
    "BUILTINS",
    "Authenticate",
    "FinishedRequest",
    "Next",
    "Plugin",
    "PluginContext",
    "PluginLoadError",
    "anonymous",
    "authenticator",
    "compose",
    "load_plugins",
]
