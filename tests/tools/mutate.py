"""On-demand mutation check of the security-critical modules: does the suite notice a bug?

Each *mutant* is the module with one classic small change — a comparison flipped (``<=`` to
``<``), ``and`` to ``or``, a ``not`` dropped, a constant changed, a call's arguments dropped
(``Redactor(secrets)`` to ``Redactor()``), one statement replaced by ``pass``. For each, the
guarding tests run against a copy of the repository holding the mutant; a mutant the tests
still pass on *survived*: either the change is harmless (an equivalent mutant) or no test
checks that behaviour. Not part of ``make test`` (a full run takes minutes); run it when a
guarded module or its tests change::

    .venv/bin/python -m tests.tools.mutate              # every group
    .venv/bin/python -m tests.tools.mutate redaction    # one group
    .venv/bin/python -m tests.tools.mutate --list       # the mutants, without running them

A group names its modules and the tests that guard them; add one to :data:`GROUPS` when a
security-critical module lands. The exit status is 1
when a mutant survived, 2 when the unmutated copy already fails its tests.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Target:
    """A module to mutate: all of it, or only the functions named in ``scope`` (qualified
    names such as ``Upstream._fail``) when the rest of the module is another concern."""

    path: str
    scope: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Group:
    """Modules whose mutants the ``tests`` (pytest paths or node ids) must kill."""

    targets: tuple[Target, ...]
    tests: tuple[str, ...]


GROUPS: dict[str, Group] = {
    # Secrets must never reach a client, a log line or a metric: the redactor, its place as the
    # first log processor, the runtime that hands it the configured keys, and the upstream
    # layer that cleans error messages before clients see them.
    "redaction": Group(
        targets=(
            Target("proxy/core/redact.py"),
            Target("proxy/core/logs.py"),
            Target("proxy/runtime/snapshot.py", scope=("Blueprint.__init__",)),
            Target("proxy/upstream/call.py", scope=("Upstream._fail",)),
        ),
        tests=(
            "tests/proxy/core/test_redact.py",
            "tests/proxy/runtime/test_config.py",
            "tests/e2e/test_openai_sdk.py",
            "tests/e2e/test_gateway_http.py",
            "tests/e2e/test_reload.py",
        ),
    ),
    # Who may call, and with what: key parsing and hashing, the authenticator, the plugin's
    # model allow-list, and the master-key guard of the admin API.
    "auth": Group(
        targets=(
            Target("proxy/governance/auth/tokens.py"),
            Target("proxy/governance/auth/authenticator.py"),
            Target("plugins/auth.py"),
            Target("proxy/admin/guard.py", scope=("_check_master_key", "admin_route.guarded")),
        ),
        tests=(
            "tests/proxy/governance/auth",
            "tests/proxy/admin",
            "tests/e2e/test_auth.py",
            "tests/e2e/test_auth_headers.py",
        ),
    ),
}

_FLIPPED_COMPARISONS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_FLIPPED_ARITHMETIC: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
}
_MUTANT_TEXT = "__mutant__"


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One changed copy of a module: ``source`` is the whole mutated file."""

    module: str
    line: int
    description: str
    source: str


def mutants(module: str, text: str, scope: Sequence[str] = ()) -> Iterator[Mutant]:
    """Every mutant of ``text`` (the source of ``module``), in source order; only inside the
    functions named in ``scope`` when it is given.

    Each mutated node's source span is replaced by the unparsed mutated node, so the rest of
    the file — comments and layout included — is untouched. Docstrings, imports, annotations
    and ``__slots__`` are left alone, and so are module- and class-level statements as a whole
    (removing one only breaks the import).
    """
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    skipped = _skipped_nodes(tree)
    found: list[tuple[ast.AST, ast.AST | str, str]] = []
    for node, qualname in _scoped_nodes(tree):
        if node in skipped or (scope and qualname not in scope):
            continue
        in_function = bool(qualname) and not isinstance(node, ast.ClassDef)
        found.extend(
            (node, new, why)
            for new, why in _node_mutations(node)
            if in_function or new != "pass"  # a whole top-level statement: see above
        )
    found.sort(key=lambda item: (item[0].lineno, item[0].col_offset))  # type: ignore[attr-defined]
    for node, replacement, description in found:
        new_text = replacement if isinstance(replacement, str) else ast.unparse(replacement)
        source = _splice(lines, node, new_text)
        yield Mutant(module, node.lineno, description, source)  # type: ignore[attr-defined]


def _scoped_nodes(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the qualified name of the function it is in ("" outside functions)."""

    def visit(node: ast.AST, path: tuple[str, ...], function: str) -> Iterator[tuple[ast.AST, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield child, function
                yield from visit(child, (*path, child.name), function)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = ".".join((*path, child.name))
                yield child, function
                yield from visit(child, (*path, child.name), name)
            else:
                yield child, function
                yield from visit(child, path, function)

    yield from visit(tree, (), "")


def _skipped_nodes(tree: ast.Module) -> set[ast.AST]:
    """Nodes (and everything under them) that are not behaviour: docstrings, imports,
    annotations, ``__slots__``."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                roots.append(body[0])
        if isinstance(node, ast.Import | ast.ImportFrom):
            roots.append(node)
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            roots.extend(a.annotation for a in _arguments(node.args) if a.annotation)
            if node.returns is not None:
                roots.append(node.returns)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            roots.append(node)
    return {inner for root in roots for inner in ast.walk(root)}


def _arguments(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return every + [a for a in (args.vararg, args.kwarg) if a is not None]


def _node_mutations(node: ast.AST) -> Iterator[tuple[ast.AST | str, str]]:
    """(replacement, description) pairs for one node."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            flipped = _FLIPPED_COMPARISONS.get(type(op))
            if flipped is not None:
                mutated = copy.deepcopy(node)
                mutated.ops[index] = flipped()
                yield mutated, f"`{_op(node, index)}` -> `{_op(mutated, index)}`"
    elif isinstance(node, ast.BoolOp):
        mutated = copy.deepcopy(node)
        mutated.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield mutated, "`and` <-> `or`"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield copy.deepcopy(node.operand), "`not` dropped"
    elif isinstance(node, ast.BinOp):
        flipped_op = _FLIPPED_ARITHMETIC.get(type(node.op))
        if flipped_op is not None:
            mutated = copy.deepcopy(node)
            mutated.op = flipped_op()
            yield mutated, f"arithmetic `{type(node.op).__name__}` -> `{flipped_op.__name__}`"
    elif isinstance(node, ast.Constant):
        yield from _constant_mutations(node)
    elif isinstance(node, ast.Call) and (node.args or node.keywords) and _is_constructor(node):
        # A constructor left with its defaults (``Redactor(secrets)`` -> ``Redactor()``) still
        # runs; dropping a plain function's arguments mostly just raises TypeError.
        mutated = copy.deepcopy(node)
        mutated.args, mutated.keywords = [], []
        yield mutated, f"`{ast.unparse(node.func)}(...)` called without arguments"
    if isinstance(node, ast.stmt) and not isinstance(
        node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Pass
    ):
        yield "pass", f"statement `{_first_line(node)}` replaced by `pass`"


def _constant_mutations(node: ast.Constant) -> Iterator[tuple[ast.AST, str]]:
    value = node.value
    if isinstance(value, bool):
        yield ast.Constant(not value), f"`{value}` -> `{not value}`"
    elif isinstance(value, int):
        yield ast.Constant(value + 1), f"`{value}` -> `{value + 1}`"
    elif isinstance(value, str) and value and not any(c.isspace() for c in value):
        # Names, codes, header names and patterns; prose (messages) is left to the reviewer.
        yield ast.Constant(_MUTANT_TEXT), f"string {value!r} -> {_MUTANT_TEXT!r}"


def _is_constructor(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name[:1].isupper()


def _op(node: ast.Compare, index: int) -> str:
    return ast.unparse(ast.Compare(ast.Name("a"), [node.ops[index]], [ast.Name("b")]))[2:-2]


def _first_line(node: ast.AST) -> str:
    line = ast.unparse(node).splitlines()[0]
    return line if len(line) <= 60 else line[:57] + "..."


def _splice(lines: list[str], node: ast.AST, replacement: str) -> str:
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    head = lines[start][: _char_offset(lines[start], node.col_offset)]  # type: ignore[attr-defined]
    tail = lines[end][_char_offset(lines[end], node.end_col_offset) :]  # type: ignore[attr-defined]
    if "\n" in replacement:  # keep a multi-line replacement at the node's indentation
        indent = " " * len(head)
        replacement = replacement.replace("\n", "\n" + indent)
    return "".join([*lines[:start], head, replacement, tail, *lines[end + 1 :]])


def _char_offset(line: str, byte_offset: int) -> int:
    """ast offsets count UTF-8 bytes; slicing counts characters."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8"))


class Workspace:
    """A copy of the repository's files (tracked and new, not ignored) in a temporary directory,
    where one module at a time is replaced by a mutant and the tests are run."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="crossway-mutants-"))
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        for name in filter(None, (entry.decode() for entry in listed)):
            source = REPO / name
            if source.is_file():
                target = self.root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)

    def run_tests(self, tests: Sequence[str], timeout: float) -> str:
        """``killed``, ``survived`` or ``timeout``: the outcome of the tests in the copy."""
        env = {**os.environ, "PYTHONPATH": str(self.root), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("COVERAGE_PROCESS_CONFIG", None)
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
        try:
            result = subprocess.run(
                command,
                cwd=self.root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "timeout"
        return "survived" if result.returncode == 0 else "killed"

    def imports_from_itself(self) -> bool:
        """Whether ``import proxy`` in the copy finds the copy (not the installed checkout)."""
        probe = subprocess.run(
            [sys.executable, "-c", "import proxy, sys; sys.stdout.write(proxy.__file__)"],
            cwd=self.root,
            env={**os.environ, "PYTHONPATH": str(self.root)},
            capture_output=True,
            text=True,
            check=True,
        )
        return Path(probe.stdout).resolve().is_relative_to(self.root.resolve())

    def write(self, module: str, source: str) -> None:
        (self.root / module).write_text(source, encoding="utf-8")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def run(names: Sequence[str], *, timeout: float, only_lines: set[int] | None) -> int:
    """Run the groups ``names``; print each mutant's outcome and a summary. Returns the exit
    status (see the module docstring)."""
    workspace = Workspace()
    try:
        if not workspace.imports_from_itself():
            print("the copy imports the installed checkout, not itself", file=sys.stderr)
            return 2
        survivors: list[tuple[str, Mutant]] = []
        total = 0
        for name in names:
            group = GROUPS[name]
            paths = ", ".join(
                t.path + (f" ({', '.join(t.scope)})" if t.scope else "") for t in group.targets
            )
            print(f"== {name}: {paths} against {len(group.tests)} test paths")
            started = time.monotonic()
            if workspace.run_tests(group.tests, timeout) != "survived":
                print("   the unmutated copy fails its tests: fix that first", file=sys.stderr)
                return 2
            baseline = time.monotonic() - started
            for target in group.targets:
                module = target.path
                original = (REPO / module).read_text(encoding="utf-8")
                for mutant in mutants(module, original, target.scope):
                    if only_lines is not None and mutant.line not in only_lines:
                        continue
                    total += 1
                    workspace.write(module, mutant.source)
                    outcome = workspace.run_tests(group.tests, max(timeout, baseline * 3))
                    print(f"   {outcome:<8} {module}:{mutant.line}  {mutant.description}")
                    if outcome == "survived":
                        survivors.append((name, mutant))
                workspace.write(module, original)
        killed = total - len(survivors)
        print(f"{killed} of {total} mutants killed, {len(survivors)} survived")
        for name, mutant in survivors:
            print(f"  survived [{name}] {mutant.module}:{mutant.line}  {mutant.description}")
        return 1 if survivors else 0
    finally:
        workspace.remove()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.mutate", description=__doc__)
    parser.add_argument("groups", nargs="*", help=f"groups to run (default: all of {list(GROUPS)})")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--line", type=int, action="append", help="only mutants on this line")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    args = parser.parse_args(argv)
    unknown = [name for name in args.groups if name not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {unknown}; known: {list(GROUPS)}")
    names = args.groups or list(GROUPS)
    if args.list:
        for name in names:
            for target in GROUPS[name].targets:
                text = (REPO / target.path).read_text(encoding="utf-8")
                for mutant in mutants(target.path, text, target.scope):
                    print(f"[{name}] {target.path}:{mutant.line}  {mutant.description}")
        return 0
    lines = set(args.line) if args.line else None
    return run(names, timeout=args.timeout, only_lines=lines)


if __name__ == "__main__":
    sys.exit(main())
