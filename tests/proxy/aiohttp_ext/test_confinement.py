"""aiohttp's internals are used in proxy/aiohttp_ext/ only.

aiohttp is pinned to its tested minor line because the gateway subclasses and reads some of its
internals; keeping every such use in one package is what makes an aiohttp upgrade a review of one
folder. Outside it, a module may import ``aiohttp`` and its public ``aiohttp.web`` / ``aiohttp.abc``
only, subclass no aiohttp class, and read no private attribute (``obj._name``) of an object that
is not its own: ``self``/``cls``, or an instance of a class the same module defines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONFINED = ROOT / "proxy" / "aiohttp_ext"
PUBLIC_MODULES = {"aiohttp", "aiohttp.web", "aiohttp.abc"}
# Private-looking names that are public API of another library.
PUBLIC_PRIVATES = {"_mapping": "SQLAlchemy's Row._mapping is its documented public accessor"}


def _own_private_names(tree: ast.Module) -> set[str]:
    """Private attribute names the module's own classes define (methods, slots, assignments)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return {n for n in names if isinstance(n, str) and n.startswith("_")}


def violations(source: str, name: str) -> list[str]:
    """What of aiohttp's internals (or any other object's private attributes) ``source`` uses."""
    tree = ast.parse(source)
    own = _own_private_names(tree)
    aiohttp_names = {"aiohttp", "web"}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aiohttp"):
            if node.module not in PUBLIC_MODULES:
                found.append(f"{name}:{node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("aiohttp") and alias.name not in PUBLIC_MODULES:
                    found.append(f"{name}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in aiohttp_names:
                    found.append(f"{name}:{node.lineno}: subclasses {ast.unparse(base)}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__") or node.attr in PUBLIC_PRIVATES or node.attr in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            found.append(f"{name}:{node.lineno}: reads {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("_"):
            found.append(f"{name}:{node.lineno}: passes {node.arg}=")
    return found


def _modules() -> list[Path]:
    return sorted(
        p for p in (ROOT / "proxy").rglob("*.py") if CONFINED not in p.parents and p.is_file()
    )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_aiohttp_ext_uses_aiohttp_internals(path: Path) -> None:
    assert violations(path.read_text(), str(path.relative_to(ROOT))) == []


@pytest.mark.parametrize(
    "source",
    [
        "from aiohttp.web_protocol import RequestHandler\n",
        "import aiohttp.http_writer\n",
        "from aiohttp import web\nclass Mine(web.Response):\n    pass\n",
        "def f(request):\n    return request._match_info\n",
        "def f(web):\n    return web.Response(_real_headers={})\n",
    ],
)
def test_the_check_finds_each_kind_of_internal_use(source: str) -> None:
    assert violations(source, "example.py"), source


def test_the_check_allows_a_module_its_own_privates() -> None:
    source = "class A:\n    __slots__ = ('_x',)\n\ndef peek(a: A) -> int:\n    return a._x\n"
    assert violations(source, "example.py") == []
