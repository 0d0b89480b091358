"""The repository's own documents: what they link to or name exists, and the config they show is
the config the gateway reads.

Documents are every markdown file of the repository, found by walking it: hidden directories
(``.git``, ``.venv*``, ``.uv``, tool caches), ``*.egg-info`` and ``tests/specs/`` (vendored API
specs, not ours) are left out.

Links (``[text](target#anchor)``) resolve from the document's folder; an anchor must match a
heading of the page it points to, as GitHub derives them. Named paths are the tokens that look
like repository paths: names ending in ``.md``, ``.py``, ``.yaml``, ``.yml``, ``.json`` or
``.toml``, and directories ending in ``/``. One with a ``/`` must exist from the repository root
or from the document's folder; a bare file name (``metered.py``, in a sentence about
``proxy/``) must be the name of a file of the repository, unless it is one of ``NOT_IN_REPO``
(files a reader writes or a command outputs); a directory is checked when its first segment is
an entry of the repository root or of the document's folder (so ``proxy/db/`` is checked, while
a model prefix such as ``openai/`` is not a path).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
import yaml

from proxy.governance.price_catalog import PriceSpec
from proxy.providers import PROVIDER_TYPES
from proxy.runtime.config import _TOP_LEVEL, GatewayConfig
from proxy.runtime.plugins import BUILTINS

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 400


def _documents() -> list[str]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and not d.endswith(".egg-info")
            and (here / d) != ROOT / "tests" / "specs"
        )
        found += [(here / f).relative_to(ROOT).as_posix() for f in files if f.endswith(".md")]
    return sorted(found)


def _repository_file_names() -> set[str]:
    names: set[str] = set()
    for _, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        names.update(files)
    return names


DOCUMENTS = _documents()
FILE_NAMES = _repository_file_names()
NOT_IN_REPO = {
    "config.yaml",  # a LiteLLM config to import
    "litellm-config.yaml",
    "crossway.yaml",  # what `crossway import litellm` writes
    "my-prices.yaml",  # a price catalog of one's own
    "results.json",  # what `python -m bench --json` writes
    "crossway.cdx.json",  # what `make sbom` writes
}
LINK = re.compile(r"\]\(([^)\s]*)\)")
NAMED = re.compile(
    r"(?<![\w./-])"
    r"((?:\.{1,2}/)?[A-Za-z0-9_][\w.-]*(?:/[\w.-]+)*(?:\.(?:md|py|ya?ml|json|toml)|/))"
    r"(?![\w/-]|\.\w)"
)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (where ``#`` starts a comment, not a heading)."""
    return FENCE.sub("", text)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of the markdown file at ``path``."""
    anchors: set[str] = set()
    for heading in HEADING.findall(_prose(path.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _exists(name: str, folder: Path) -> bool:
    return (ROOT / name).exists() or (folder / name).exists()


def _broken_link(target: str, document: Path) -> bool:
    file, _, anchor = target.partition("#")
    linked = (document.parent / file).resolve() if file else document
    if not linked.exists():
        return True
    return bool(anchor) and linked.suffix == ".md" and anchor not in _anchors(linked)


def _missing_named(name: str, folder: Path) -> bool:
    if name.endswith("/"):
        first = name.split("/", 1)[0]
        is_path = (ROOT / first).is_dir() or (folder / first).is_dir()
        return is_path and not _exists(name, folder)
    if "/" in name:
        return not _exists(name, folder)
    return not _exists(name, folder) and name not in FILE_NAMES and name not in NOT_IN_REPO


def test_documents_are_found() -> None:
    assert {"README.md", "ARCHITECTURE.md", "docs/configuration.md"} <= set(DOCUMENTS)
    assert not [d for d in DOCUMENTS if d.startswith(("tests/specs/", ".venv", ".uv"))]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_linked_or_named_file_exists(document: str) -> None:
    path = ROOT / document
    text = path.read_text()
    links = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:"))]
    missing = {t for t in links if _broken_link(t, path)}
    missing |= {n for n in NAMED.findall(text) if _missing_named(n, path.parent)}
    assert not missing, (
        f"{document} refers to files or anchors that do not exist: {sorted(missing)}"
    )


def test_the_readme_is_at_most_400_lines() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


def test_the_readme_maps_every_config_section_and_plugin_to_its_page() -> None:
    """The README's configuration table: one click from any config key to its page."""
    readme = (ROOT / "README.md").read_text()
    table = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [row for row in table.splitlines() if row.startswith("| `") and "](docs/" in row]
    sections = {m for row in rows for m in re.findall(r"`([a-z_]+)", row.split(" | ")[0])}
    plugins = {m for row in rows for m in re.findall(r"`?- ([a-z_]+)", row.split(" | ")[0])}
    assert set(_TOP_LEVEL) <= sections, sorted(set(_TOP_LEVEL) - sections)
    assert set(BUILTINS) <= plugins, sorted(set(BUILTINS) - plugins)


# --- config keys shown in the documents ---------------------------------------------------------


def _yaml_blocks(text: str) -> Iterator[tuple[int, str]]:
    for match in FENCE.finditer(text):
        if match.group(1) in ("yaml", "yml"):
            yield text.count("\n", 0, match.start()) + 1, match.group(2)


def _config_blocks() -> Iterator[Any]:
    """Every ```yaml block of the documents that is a Crossway config.

    The rule: a block is a Crossway config when it loads as a mapping and at least one of its
    top-level keys is a config section (``server``, ``providers``, ``plugins`` …); then every
    top-level key must be one. Blocks sharing no key with the config — docker-compose files,
    Prometheus and Kubernetes fragments, LiteLLM's ``model_list`` configs — are not Crossway
    configs and are skipped. Every yaml block must load; lines holding only an ellipsis (``…``)
    are dropped first.
    """
    for document in DOCUMENTS:
        for line, block in _yaml_blocks((ROOT / document).read_text()):
            kept = "\n".join(x for x in block.splitlines() if x.strip() not in ("…", "..."))
            where = f"{document}:{line}"
            try:
                tree = yaml.safe_load(kept)
            except yaml.YAMLError as exc:
                yield pytest.param(None, str(exc), id=where)
                continue
            if isinstance(tree, dict) and set(tree) & _TOP_LEVEL:
                yield pytest.param(tree, "", id=where)


_SECTION_TYPES = {f.name: f.type for f in msgspec.structs.fields(GatewayConfig)}


def _unknown_keys(node: Any, kind: mi.Type, path: str) -> Iterator[str]:
    """The keys of ``node`` (a YAML tree) that the type ``kind`` has no field for."""
    if isinstance(kind, mi.Metadata):
        yield from _unknown_keys(node, kind.type, path)
    elif isinstance(kind, mi.UnionType):
        tagged = _tagged_member(node, kind)
        if tagged is not None:
            yield from _unknown_keys(node, tagged, path)
            return
        for member in kind.types:
            if isinstance(member, mi.Metadata):
                member = member.type
            mapping = isinstance(member, mi.StructType | mi.DictType)
            sequence = isinstance(member, mi.ListType | mi.VarTupleType | mi.TupleType)
            if (isinstance(node, dict) and mapping) or (isinstance(node, list) and sequence):
                yield from _unknown_keys(node, member, path)
                return
    elif isinstance(kind, mi.StructType) and isinstance(node, dict):
        fields = {f.encode_name: f.type for f in kind.fields}
        for key, value in node.items():
            if key is True and "on" in fields:  # YAML 1.1 reads a bare `on` as true
                key = "on"
            if key == kind.tag_field:
                continue
            if key not in fields:
                yield f"{path}.{key}"
            else:
                yield from _unknown_keys(value, fields[key], f"{path}.{key}")
    elif isinstance(kind, mi.DictType) and isinstance(node, dict):
        for key, value in node.items():
            yield from _unknown_keys(value, kind.value_type, f"{path}.{key}")
    elif isinstance(kind, mi.ListType | mi.VarTupleType):
        items = node if isinstance(node, list) else [node]  # one deployment may stand alone
        for i, value in enumerate(items):
            yield from _unknown_keys(value, kind.item_type, f"{path}[{i}]")


def _tagged_member(node: Any, kind: mi.UnionType) -> mi.StructType | None:
    """The member of a union of tagged Structs that ``node`` names by its tag, if any."""
    if not isinstance(node, dict):
        return None
    for member in kind.types:
        if (
            isinstance(member, mi.StructType)
            and member.tag_field is not None
            and node.get(member.tag_field) == member.tag
        ):
            return member
    return None


def _section_keys(section: str, node: Any) -> Iterator[str]:
    path = f"$.{section}"
    if section == "providers":
        for name, spec in (node or {}).items():
            kind = PROVIDER_TYPES.get(spec.get("type")) if isinstance(spec, dict) else None
            if kind is None:
                yield f"{path}.{name}.type"
                continue
            spec = dict(spec)
            prices = spec.pop("prices", None) or {}
            yield from _unknown_keys(spec, mi.type_info(kind.config), f"{path}.{name}")
            for model, price in prices.items():
                where = f"{path}.{name}.prices.{model}"
                yield from _unknown_keys(price, mi.type_info(PriceSpec), where)
    elif section == "plugins":
        for i, entry in enumerate(node or []):
            yield from _plugin_keys(entry, f"{path}[{i}]")
    else:
        yield from _unknown_keys(node, mi.type_info(_SECTION_TYPES[section]), path)


def _plugin_keys(entry: Any, path: str) -> Iterator[str]:
    if isinstance(entry, str):
        if entry not in BUILTINS:
            yield f"{path}: {entry}"
        return
    if "plugin" in entry:  # a custom plugin: its options are its own
        yield from (f"{path}.{key}" for key in entry if key not in ("plugin", "options"))
        return
    ((name, options),) = entry.items()
    if name not in BUILTINS:
        yield f"{path}.{name}"
        return
    module, _, cls = BUILTINS[name].partition(":")
    option_type = getattr(getattr(importlib.import_module(module), cls), "Options", None)
    if option_type is None:
        yield from (f"{path}.{name}.{key}" for key in options or {})
    else:
        yield from _unknown_keys(options or {}, mi.type_info(option_type), f"{path}.{name}")


@pytest.mark.parametrize(("tree", "error"), list(_config_blocks()))
def test_every_config_key_shown_exists_in_the_config_schema(tree: Any, error: str) -> None:
    assert not error, f"the yaml block does not load: {error}"
    unknown = [f"$.{key}" for key in tree if key not in _TOP_LEVEL]
    for section, node in tree.items():
        if section in _TOP_LEVEL:
            unknown += _section_keys(section, node)
    assert not unknown, f"keys the config schema does not have: {unknown}"


def test_the_schema_check_sees_a_wrong_key() -> None:
    tree = yaml.safe_load(
        "server: {port: 1, cors: {allow_origin: [x]}}\n"
        "state: {redis: {breaker: {failure: 3}}}\n"
        "auth: {teams: {t: {rpm: 1, budgte: {}}}, keys: [{key: k, alias: a, model: [x]}]}\n"
        "providers: {p: {type: openai, base_ur: x, prices: {m: {input: 1, outptu: 2}}}}\n"
        "models: {a: {target: p/m, wieght: 2}}\n"
        "plugins: [{cache: {semantic: {treshold: 0.9}}}, {retry: {retires: 2}}, {auth: {x: 1}}]\n"
    )
    found = [key for section, node in tree.items() for key in _section_keys(section, node)]
    assert found == [
        "$.server.cors.allow_origin",
        "$.state.redis.breaker.failure",
        "$.auth.teams.t.budgte",
        "$.auth.keys[0].model",
        "$.providers.p.base_ur",
        "$.providers.p.prices.m.outptu",
        "$.models.a[0].wieght",
        "$.plugins[0].cache.semantic.treshold",
        "$.plugins[1].retry.retires",
        "$.plugins[2].auth.x",
    ]
