"""LiteLLM's ``guardrails`` → Crossway's ``masking`` plugin.

Only the Presidio PII guardrail has an equivalent: ``guardrail: presidio`` in ``pre_call`` or
``during_call`` mode becomes ``masking`` with the entities of ``pii_entities_config`` in
Crossway's names (Presidio's ``EMAIL_ADDRESS`` → ``email``, ``PHONE_NUMBER`` → ``phone``,
``CREDIT_CARD``, ``IBAN_CODE``, ``US_SSN``, ``IP_ADDRESS``) and their actions (``MASK`` →
``mask``, ``BLOCK`` → ``block``); without ``pii_entities_config`` every entity Crossway detects
is masked, as Presidio masks everything it finds. ``output_parse_pii: true`` restores masked
values in the reply (``output: restore``); without it the placeholders stay (``output: none``).
Presidio entities Crossway cannot detect (``PERSON``, ``LOCATION`` …), other guardrails,
``post_call`` / ``logging_only`` modes and guardrails that are off by default are reported.
"""

from __future__ import annotations

from typing import Any

from proxy.admin.migrate.result import Translation

_ENTITIES = {
    "EMAIL_ADDRESS": "email",
    "PHONE_NUMBER": "phone",
    "CREDIT_CARD": "credit_card",
    "IBAN_CODE": "iban",
    "US_SSN": "us_ssn",
    "IP_ADDRESS": "ip_address",
}
_ACTIONS = {"MASK": "mask", "BLOCK": "block"}
_MODES = ("pre_call", "during_call")
_USED = frozenset({"guardrail", "mode", "pii_entities_config", "output_parse_pii", "default_on"})
_USED |= {"presidio_language", "presidio_analyzer_api_base", "presidio_anonymizer_api_base"}


def translate_guardrails(node: Any, result: Translation) -> dict[str, Any] | None:
    """The ``masking`` plugin's options for the guardrails ``node``, or None without a
    translatable one; everything else is reported to ``result``."""
    if node is None:
        return None
    masking: dict[str, Any] | None = None
    for index, entry in enumerate(node if isinstance(node, list) else [node]):
        path = f"$.guardrails[{index}]"
        params = entry.get("litellm_params") if isinstance(entry, dict) else None
        if not isinstance(params, dict):
            result.skip(path, "expected guardrail_name and litellm_params")
            continue
        kind = params.get("guardrail")
        if kind != "presidio":
            result.skip(path, f"guardrail {kind!r}: Crossway's only guardrail is PII masking")
            continue
        if masking is not None:
            result.skip(path, "a second presidio guardrail: the first one is translated")
            continue
        masking = _presidio(params, path, result)
    return masking


def _presidio(params: dict[str, Any], path: str, result: Translation) -> dict[str, Any] | None:
    mode = params.get("mode", "pre_call")
    if mode not in _MODES:
        result.skip(f"{path}.litellm_params.mode", f"{mode!r}: Crossway masks before the call")
        return None
    if params.get("default_on") is False:
        result.skip(
            f"{path}.litellm_params.default_on",
            "masking applies to every request (orq's pii_redaction can add entities per request)",
        )
    entities: dict[str, str] = {}
    configured = params.get("pii_entities_config")
    if isinstance(configured, dict):
        for name, action in configured.items():
            where = f"{path}.litellm_params.pii_entities_config.{name}"
            if name not in _ENTITIES:
                result.skip(where, f"Crossway does not detect {name}")
            elif str(action).upper() not in _ACTIONS:
                result.skip(where, f"action {action!r}: Crossway's are mask and block")
            else:
                entities[_ENTITIES[name]] = _ACTIONS[str(action).upper()]
    else:
        entities = {entity: "mask" for entity in _ENTITIES.values()}
    for key in sorted(set(params) - _USED):
        result.skip(f"{path}.litellm_params.{key}", "no Crossway equivalent for this setting")
    result.notes.append(
        f"{path}: Presidio runs in a container; Crossway's masking runs in process, with "
        "validated detectors and no NLP (names and addresses are not detected)"
    )
    output = "restore" if params.get("output_parse_pii") else "none"
    return {"entities": entities, "output": output}
