"""The specs the suite validates against are in the repository, listed, and fail if absent."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.schemas import SPECS_DIR, SpecMissingError, load_spec, spec_path, validate_in

README = SPECS_DIR / "README.md"
_ROW = re.compile(r"^\| `(?P<name>[^`]+)` \|", re.MULTILINE)


def listed_specs() -> list[str]:
    """The file names in the first column of the README's table."""
    return _ROW.findall(README.read_text(encoding="utf-8"))


def test_every_listed_spec_is_present_and_every_present_spec_is_listed():
    present = sorted(path.name for path in SPECS_DIR.iterdir() if path.name != "README.md")
    assert sorted(listed_specs()) == present


@pytest.mark.parametrize("name", [name for name in listed_specs() if name.endswith(".json")])
def test_each_openapi_spec_parses_and_names_its_schemas(name: str):
    document = load_spec(name)
    assert document["openapi"].startswith("3.")
    assert document["components"]["schemas"], f"{name} has no schemas to validate against"
    assert document["paths"], f"{name} has no operations"


def test_a_missing_spec_is_an_error_not_a_skip():
    with pytest.raises(SpecMissingError, match=r"not-there\.openapi\.json"):
        spec_path("not-there.openapi.json")
    with pytest.raises(SpecMissingError):
        validate_in("not-there.openapi.json", "Anything", {})


def test_the_schema_helpers_refuse_to_import_without_the_openai_spec(tmp_path):
    """A checkout without ``tests/specs/`` fails each module that validates, instead of skipping."""
    copy = tmp_path / "schemas.py"
    copy.write_text((SPECS_DIR.parent / "schemas.py").read_text(encoding="utf-8"))
    module_spec = importlib.util.spec_from_file_location("schemas_without_specs", copy)
    module = importlib.util.module_from_spec(module_spec)
    # The copy defines its own SpecMissingError class; match on the base class and the message.
    with pytest.raises(FileNotFoundError, match=r"spec .openai-chat\.openapi\.json. not found"):
        module_spec.loader.exec_module(module)
