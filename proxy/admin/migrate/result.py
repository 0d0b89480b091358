"""What a translation produces: the Crossway config tree, what could not be translated (with
why), and notes on what was translated but behaves differently on purpose."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_ENV_PREFIX = "os.environ/"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class Untranslated:
    """One setting of the source config that the translation could not carry over.

    ``path`` is where it is in the source (``$.litellm_settings.callbacks``), ``reason`` why it
    was left out (and what to do instead, when there is something)."""

    path: str
    reason: str


@dataclasses.dataclass
class Translation:
    """The translated config tree (plain YAML values, ready to dump), every
    :class:`Untranslated` item, and ``notes``: translated settings whose behaviour differs."""

    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    untranslated: list[Untranslated] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when nothing was left out."""
        return not self.untranslated

    def skip(self, path: str, reason: str) -> None:
        """Record that the setting at ``path`` was not translated, and why."""
        self.untranslated.append(Untranslated(path, reason))


def env_value(value: Any, default: str | None = None) -> Any:
    """A source value with LiteLLM's ``os.environ/NAME`` written as Crossway's ``${NAME}``
    (``${NAME:-default}`` when ``default`` is given); anything else unchanged."""
    if isinstance(value, str) and value.startswith(_ENV_PREFIX):
        name = value[len(_ENV_PREFIX) :]
        if _ENV_NAME.match(name):
            return f"${{{name}}}" if default is None else f"${{{name}:-{default}}}"
    return value


def env_names(node: Any) -> list[str]:
    """Every ``${NAME}`` referenced in the string values below ``node``, in order, once."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", value):
                if name not in found:
                    found.append(name)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(node)
    return found
