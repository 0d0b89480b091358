"""The names a request may give the built-in entities (orq's per-request ``pii_redaction``
entries use Presidio's), and the labels their redacted or masked values carry then."""

PRESIDIO_LABELS: dict[str, str] = {
    "secret": "SECRET",
    "email": "EMAIL_ADDRESS",
    "credit_card": "CREDIT_CARD",
    "iban": "IBAN_CODE",
    "us_ssn": "US_SSN",
    "ip_address": "IP_ADDRESS",
    "phone": "PHONE_NUMBER",
}
"""Each built-in entity's Presidio label, in the order the entities win ties."""

REQUEST_NAMES: dict[str, str] = {
    **{entity: entity for entity in PRESIDIO_LABELS},
    **{label.lower(): entity for entity, label in PRESIDIO_LABELS.items()},
}
"""A request's entity name, lower-cased (Presidio's or the gateway's own), to the entity."""
