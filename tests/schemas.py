"""Validate gateway output against the OpenAPI schemas in ``../shared/specs`` (beside the repo).

``validate(schema_name, instance)`` checks ``instance`` against
``#/components/schemas/<schema_name>`` of ``openai-chat.openapi.json`` and raises
:class:`jsonschema.ValidationError` if it does not conform. The spec is OpenAPI 3.1 (JSON Schema
2020-12) with some OpenAPI 3.0 leftovers: ``nullable: true`` is rewritten to also allow ``null``.
``$ref``s resolve inside the document through a :mod:`referencing` registry.

Importing this module from a test module skips that whole module when the spec is not found.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

REPO_ROOT = Path(__file__).resolve().parents[1]
SPECS_DIR = REPO_ROOT / ".." / "shared" / "specs"
SPEC_FILE = SPECS_DIR / "openai-chat.openapi.json"
_SPEC_URI = "urn:crossway:openai-chat.openapi.json"

if not SPEC_FILE.is_file():
    pytest.skip(f"OpenAPI spec not found at {SPEC_FILE.resolve()}", allow_module_level=True)


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
    document = _allow_null(json.loads(SPEC_FILE.read_text(encoding="utf-8")))
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
    path = SPECS_DIR / spec_file
    document = _allow_null(json.loads(path.read_text(encoding="utf-8")))
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
    document = _allow_null(json.loads((SPECS_DIR / spec_file).read_text(encoding="utf-8")))
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
