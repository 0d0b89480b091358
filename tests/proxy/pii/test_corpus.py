"""Detection quality on the labelled corpus (tests/proxy/pii/corpus): per-entity precision and
recall of all built-in detectors together, each at least 0.98, and the confusion table printed.

A detection counts as right when its entity and its exact text match a labelled span; anything
else a detector finds — in a positive snippet of another entity or in a hard negative — is a
false positive of its entity, and a labelled span not found exactly is a false negative.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from proxy.pii.detectors import BUILTIN_FINDERS
from proxy.pii.scanner import Scanner
from proxy.pii.secrets import find_secrets
from tests.proxy.pii.corpus.build import ENTITIES, build

CORPUS = Path(__file__).parent / "corpus"
SCANNER = Scanner([("secret", find_secrets), *BUILTIN_FINDERS.items()])
THRESHOLD = 0.98
NONE = "-"


def load() -> list[dict[str, Any]]:
    records = []
    for entity in ENTITIES:
        lines = (CORPUS / f"{entity}.jsonl").read_text(encoding="utf-8").splitlines()
        records += [json.loads(line) for line in lines]
    return records


def test_the_corpus_files_are_what_the_builder_makes() -> None:
    for name, content in build().items():
        assert (CORPUS / name).read_text(encoding="utf-8") == content, (
            f"{name} is stale: run python -m tests.proxy.pii.corpus.build"
        )


def test_each_entity_has_200_positives_and_200_hard_negatives() -> None:
    counts = Counter((r["entity"], r["positive"]) for r in load())
    for entity in ENTITIES:
        assert counts[entity, True] >= 200
        assert counts[entity, False] >= 200
    negatives = [r for r in load() if not r["positive"]]
    assert all(r["spans"] == [] for r in negatives)


def test_precision_and_recall_per_entity(capsys: pytest.CaptureFixture[str]) -> None:
    matrix: Counter[tuple[str, str]] = Counter()  # (labelled, detected)
    true_positives: Counter[str] = Counter()
    false_positives: Counter[str] = Counter()
    false_negatives: Counter[str] = Counter()
    misses: list[str] = []
    for record in load():
        text = record["text"]
        labelled = {(entity, value) for entity, value in record["spans"]}
        detected = {(f.entity, text[f.start : f.end]) for f in SCANNER.scan(text)}
        for entity, value in labelled:
            if (entity, value) in detected:
                true_positives[entity] += 1
                matrix[entity, entity] += 1
            else:
                false_negatives[entity] += 1
                other = next((e for e, v in detected if value in v or v in value), NONE)
                matrix[entity, other] += 1
                misses.append(f"missed {entity}: {text!r}")
        for entity, value in detected - labelled:
            false_positives[entity] += 1
            if not any(value in v or v in value for _, v in labelled):
                matrix[NONE, entity] += 1
            misses.append(f"false {entity} {value!r}: {text!r}")
    rows = []
    quality: dict[str, tuple[float, float]] = {}
    for entity in ENTITIES:
        tp, fp, fn = true_positives[entity], false_positives[entity], false_negatives[entity]
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        quality[entity] = (precision, recall)
        rows.append(f"{entity:<12} {tp:>5} {fp:>4} {fn:>4}   {precision:.4f}   {recall:.4f}")
    columns = [*ENTITIES, NONE]
    header = "labelled \\ detected " + " ".join(f"{c[:11]:>11}" for c in columns)
    table = [header] + [
        f"{row[:19]:<19} " + " ".join(f"{matrix[row, column]:>11}" for column in columns)
        for row in columns
    ]
    with capsys.disabled():
        print("\n\nPII corpus: entity, TP, FP, FN, precision, recall")
        print("\n".join(rows))
        print("\nconfusion (labelled span -> what was detected on it; '-' = nothing)")
        print("\n".join(table))
        if misses:
            print("\nerrors:\n  " + "\n  ".join(misses[:40]))
    for entity, (precision, recall) in quality.items():
        assert precision >= THRESHOLD, f"{entity} precision {precision:.4f}"
        assert recall >= THRESHOLD, f"{entity} recall {recall:.4f}"
