"""Validate gateway output against the trimmed OpenAPI schemas kept in ``tests/specs/``.

``validate(schema_name, instance)`` checks ``instance`` against
``#/components/schemas/<schema_name>`` of ``openai-chat.openapi.json`` and raises
:class:`jsonschema.ValidationError` if it does not conform. The spec is OpenAPI 3.1 (JSON Schema
2020-12) with some OpenAPI 3.0 leftovers: ``nullable: true`` is rewritten to also allow ``null``.
``$ref``s resolve inside the document through a :mod:`referencing` registry.

The specs are part of the repository (``tests/specs/README.md`` names each file's public source).
A missing spec file is an error, never a skip: importing this module raises
:class:`SpecMissingError` when the OpenAI spec is absent, which fails the collection of every test
module that validates against it, and :func:`spec_path` raises the same for any other spec.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPECS_DIR = Path(__file__).resolve().parent / "specs"
OPENAI_SPEC = "openai-chat.openapi.json"
_SPEC_URI = f"urn:crossway:{OPENAI_SPEC}"


class SpecMissingError(FileNotFoundError):
    """A spec file the tests validate against is not in ``tests/specs/``."""


def spec_path(spec_file: str) -> Path:
    """The path of ``spec_file`` in the specs directory; :class:`SpecMissingError` if absent."""
    path = SPECS_DIR / spec_file
    if not path.is_file():
        raise SpecMissingError(
            f"spec {spec_file!r} not found in {SPECS_DIR}: the tests validate against it, so it "
            "must be in the repository (see tests/specs/README.md)"
        )
    return path


def load_spec(spec_file: str) -> dict[str, Any]:
    """The parsed JSON document of ``spec_file`` (:class:`SpecMissingError` if absent)."""
    return json.loads(spec_path(spec_file).read_text(encoding="utf-8"))


SPEC_FILE = spec_path(OPENAI_SPEC)


def _allow_null(node: Any) -> Any:
    """A copy of ``node`` where every ``nullable: true`` schema also accepts ``null``."""
    if isinstance(node, list):
        return [_allow_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _allow_null(value) for key, value in node.items()}
    if converted.get("nullable") is not True:
        return converted
    del converted["nullable"]
    kind = converted.get("type")
    if isinstance(kind, str):
        converted["type"] = [kind, "null"]
        if "enum" in converted and None not in converted["enum"]:
            converted["enum"] = [*converted["enum"], None]
        return converted
    if isinstance(kind, list):
        if "null" not in kind:
            converted["type"] = [*kind, "null"]
        if "enum" in converted and None not in converted["enum"]:
            converted["enum"] = [*converted["enum"], None]
        return converted
    return {"anyOf": [converted, {"type": "null"}]}


@functools.cache
def _registry() -> tuple[Registry, frozenset[str]]:
    document = _allow_null(load_spec(OPENAI_SPEC))
    resource = Resource(contents=document, specification=DRAFT202012)
    names = frozenset(document.get("components", {}).get("schemas", {}))
    return Registry().with_resource(_SPEC_URI, resource), names


@functools.cache
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    registry, names = _registry()
    if schema_name not in names:
        raise KeyError(f"no schema {schema_name!r} in {SPEC_FILE.name}")
    schema = {"$ref": f"{_SPEC_URI}#/components/schemas/{schema_name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(schema_name: str, instance: dict) -> None:
    """Raise :class:`jsonschema.ValidationError` unless ``instance`` conforms to the schema."""
    _validator(schema_name).validate(instance)


@functools.cache
def _spec_validator(spec_file: str, schema_name: str) -> jsonschema.Draft202012Validator:
    document = _allow_null(load_spec(spec_file))
    if schema_name not in document.get("components", {}).get("schemas", {}):
        raise KeyError(f"no schema {schema_name!r} in {spec_file}")
    uri = f"urn:crossway:{spec_file}"
    resource = Resource(contents=document, specification=DRAFT202012)
    schema = {"$ref": f"{uri}#/components/schemas/{schema_name}"}
    return jsonschema.Draft202012Validator(schema, registry=Registry().with_resource(uri, resource))


def validate_in(spec_file: str, schema_name: str, instance: dict) -> None:
    """Like :func:`validate`, against ``#/components/schemas/<schema_name>`` of ``spec_file``
    (a file name in the specs directory, e.g. ``anthropic-messages.openapi.json``)."""
    _spec_validator(spec_file, schema_name).validate(instance)


@functools.cache
def _spec_registry(spec_file: str) -> Registry:
    document = _allow_null(load_spec(spec_file))
    resource = Resource(contents=document, specification=DRAFT202012)
    return Registry().with_resource(f"urn:crossway:{spec_file}", resource)


def _anchor_refs(node: Any, uri: str) -> Any:
    """A copy of ``node`` whose document-local ``$ref``s (``#/...``) point into ``uri``."""
    if isinstance(node, list):
        return [_anchor_refs(item, uri) for item in node]
    if not isinstance(node, dict):
        return node
    anchored = {key: _anchor_refs(value, uri) for key, value in node.items()}
    ref = anchored.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        anchored["$ref"] = uri + ref
    return anchored


def validate_schema(spec_file: str, schema: dict, instance: Any) -> None:
    """Validate ``instance`` against an ad-hoc ``schema`` (a dict) whose ``#/components/...``
    references resolve in ``spec_file`` — for shapes a spec implies but does not name (e.g. a
    stream frame derived from its response schema). ``nullable: true`` is honoured as above."""
    uri = f"urn:crossway:{spec_file}"
    anchored = _anchor_refs(_allow_null(schema), uri)
    jsonschema.Draft202012Validator(anchored, registry=_spec_registry(spec_file)).validate(instance)
