"""Restoring placeholders and redacting output: whole texts, and streams of pieces split
anywhere (a placeholder across pieces, a JSON-escaped placeholder in tool arguments)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.canonical import Message
from proxy.pii.detectors import BUILTIN_FINDERS
from proxy.pii.request import Rule, mask_messages
from proxy.pii.restore import OutputRedactor, Pipeline, Restorer
from proxy.pii.scanner import Scanner
from proxy.pii.vault import Replacer, Vault

SCANNER = Scanner(list(BUILTIN_FINDERS.items()))
RULES = {entity: Rule("mask", entity.upper()) for entity in BUILTIN_FINDERS}


def vault_with(*values: tuple[str, str]) -> Vault:
    vault = Vault()
    for label, value in values:
        vault.placeholder(label, value)
    return vault


def feed_all(stage: Restorer | OutputRedactor | Pipeline, pieces: list[str]) -> list[str]:
    out = [stage.feed(piece) for piece in pieces]
    out.append(stage.flush())
    return out


def test_whole_text_restores_known_placeholders_only() -> None:
    vault = vault_with(("EMAIL", "a@example.com"))
    restorer = Restorer(vault)
    assert restorer.whole("to <EMAIL_1>, not <EMAIL_2> or <PHONE_1>") == (
        "to a@example.com, not <EMAIL_2> or <PHONE_1>"
    )


def test_a_split_placeholder_is_held_until_complete_never_half_sent() -> None:
    vault = vault_with(("EMAIL", "a@example.com"))
    out = feed_all(Restorer(vault), ["Write to <EM", "AIL", "_1", "> today"])
    assert out == ["Write to ", "", "", "a@example.com today", ""]
    assert not any("<" in piece for piece in out)


def test_a_stray_angle_bracket_is_released_when_it_cannot_be_a_placeholder() -> None:
    out = feed_all(Restorer(vault_with(("EMAIL", "x@example.com"))), ["if a <", " b then"])
    assert out == ["if a ", "< b then", ""]


def test_held_text_is_released_as_written_at_the_end() -> None:
    out = feed_all(Restorer(vault_with(("EMAIL", "x@example.com"))), ["cut off <EMAIL_"])
    assert "".join(out) == "cut off <EMAIL_"


def test_json_arguments_get_escaped_values_and_escaped_placeholders_are_found() -> None:
    vault = vault_with(("CUSTOM", 'O"Brien \\ né'), ("EMAIL", "a@example.com"))
    restorer = Restorer(vault, json=True)
    arguments = '{"name": "<CUSTOM_1>", "to": "\\u003cEMAIL_1\\u003e"}'
    restored = restorer.whole(arguments)
    assert json.loads(restored) == {"name": 'O"Brien \\ né', "to": "a@example.com"}
    pieces = ['{"to": "\\u00', "3cEMA", "IL_1\\u0", "03e", '"}']
    streamed = "".join(feed_all(Restorer(vault, json=True), pieces))
    assert json.loads(streamed) == {"to": "a@example.com"}


def test_output_redactor_redacts_a_value_split_across_pieces() -> None:
    seen: list[str] = []
    redactor = OutputRedactor(SCANNER, {"email": "EMAIL"}, seen.append, window=64)
    out = feed_all(redactor, ["reach me at john.sm", "ith@exam", "ple.com please"])
    assert "".join(out) == "reach me at <EMAIL> please"
    assert seen == ["email"]
    assert not any("john" in piece or "example" in piece for piece in out)


def test_pipeline_redacts_before_restoring() -> None:
    vault = vault_with(("EMAIL", "user@example.com"))
    pipeline = Pipeline(
        [OutputRedactor(SCANNER, {"email": "EMAIL"}, lambda _: None, 64), Restorer(vault)]
    )
    out = feed_all(pipeline, ["I wrote to <EMA", "IL_1> and leaked ceo@corp.example.com", "."])
    assert "".join(out) == "I wrote to user@example.com and leaked <EMAIL>."


values = st.sampled_from(
    [
        "jane.doe@example.com",
        "+44 20 7946 0958",
        "4111 1111 1111 1111",
        "DE89 3704 0044 0532 0130 00",
        "536-22-1042",
        "10.20.30.40",
        "bob@mail.example.org",
    ]
)
filler = st.text(st.characters(codec="utf-8", exclude_characters="<>"), max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.tuples(filler, values), min_size=1, max_size=6),
    tail=filler,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_mask_then_restore_in_random_chunks_gives_the_original(
    parts: list[tuple[str, str]], tail: str, cuts: list[int]
) -> None:
    text = " ".join(f"{before} {value} " for before, value in parts) + tail
    masked = mask_messages(
        [Message(role="user", content=text)], SCANNER, RULES, {"user"}, Replacer()
    )
    sent = masked.messages[0].content
    assert isinstance(sent, str)
    for _, value in parts:
        assert value not in sent
    # The model echoes the masked text; it reaches the gateway in arbitrary pieces.
    points = sorted({min(cut, len(sent)) for cut in cuts})
    pieces = [sent[a:b] for a, b in zip([0, *points], [*points, len(sent)], strict=True)]
    restored = feed_all(Restorer(masked.vault), pieces)
    assert "".join(restored) == text
    assert not any("<" in piece for piece in restored if "<" not in text)
