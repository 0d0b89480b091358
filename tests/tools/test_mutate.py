"""tests/tools/mutate.py: it plants the classic mutants, as valid Python, one at a time."""

from __future__ import annotations

import ast

import pytest

from tests.tools.mutate import GROUPS, REPO, mutants

SAMPLE = '''"""A module docstring."""

import os

LIMIT = 10  # a comment that must survive


class Guard:
    """A class docstring."""

    __slots__ = ("secrets",)

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets

    def allows(self, hint: float) -> bool:
        # keep me
        return hint <= LIMIT and not os.environ.get("STRICT")


def build() -> Guard:
    return Guard(["a"])
'''


def descriptions(text: str, scope: tuple[str, ...] = ()) -> list[str]:
    return [f"{m.line}: {m.description}" for m in mutants("m.py", text, scope)]


def test_the_classic_mutants_are_planted():
    found = descriptions(SAMPLE)
    assert "18: `<=` -> `<`" in found
    assert "18: `and` <-> `or`" in found
    assert "18: `not` dropped" in found
    assert "5: `10` -> `11`" in found
    assert "22: `Guard(...)` called without arguments" in found
    assert "14: statement `self.secrets = secrets` replaced by `pass`" in found


def test_docstrings_imports_annotations_slots_and_top_level_statements_are_left_alone():
    found = descriptions(SAMPLE)
    assert not [d for d in found if d.startswith(("1:", "3:", "11:"))]
    assert not [d for d in found if "docstring" in d or "list[str]" in d]
    assert "5: statement `LIMIT = 10` replaced by `pass`" not in found


def test_a_mutant_changes_only_its_node_and_keeps_comments():
    (mutant,) = [m for m in mutants("m.py", SAMPLE) if m.description == "`<=` -> `<`"]
    assert mutant.source == SAMPLE.replace("hint <= LIMIT", "hint < LIMIT")
    assert "# keep me" in mutant.source
    assert "# a comment that must survive" in mutant.source


def test_a_scope_limits_the_mutants_to_its_functions():
    lines = {m.line for m in mutants("m.py", SAMPLE, ("Guard.allows",))}
    assert lines == {18}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_mutant_of_every_group_is_valid_python_and_differs(group: str):
    count = 0
    for target in GROUPS[group].targets:
        original = (REPO / target.path).read_text(encoding="utf-8")
        for mutant in mutants(target.path, original, target.scope):
            ast.parse(mutant.source)
            assert mutant.source != original, mutant.description
            count += 1
    assert count > 0
    for path in GROUPS[group].tests:
        assert (REPO / path.split("::")[0]).exists(), f"{group}: no test path {path}"


def test_the_redaction_group_plants_the_forgotten_configured_secrets():
    # The planted bug issue 11 found uncaught: the runtime building its redactor without keys.
    runtime = next(t for t in GROUPS["redaction"].targets if t.path == "proxy/runtime/snapshot.py")
    text = (REPO / runtime.path).read_text(encoding="utf-8")
    found = [m.description for m in mutants(runtime.path, text, runtime.scope)]
    assert "`Redactor(...)` called without arguments" in found
