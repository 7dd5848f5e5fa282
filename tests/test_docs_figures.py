"""No page contradicts a shipped constant (issue 38). A doc that quotes a figure of a shipped
file marks it with an HTML comment right after the number (and its unit, one word, if any):

    scale 0.498 <!-- shipped: layerwise/data/default_predictor/composition.json: scale.fp32 -->
    a residual <!-- shipped: layerwise/data/default_predictor/composition.json: residual present -->

The path is relative to the repository root; the key is dotted (a JSON object's keys, a list's
index; for a CSV the first column's value, then the column's name). The quoted number must equal
the shipped value rounded to the quoted decimals; ``present`` only asks that the key exists.
Every marker in README.md and docs/**/*.md is checked, and the composition constants must be
marked somewhere."""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from paths import REPO

MARKER = re.compile(r"(?:(-?\d[\d,]*(?:\.\d+)?)\s*(?:[A-Za-zµ%]+(?:/s)?)?\s*)?"
                    r"<!-- shipped: (\S+): (.+?)( present)? -->")
COMPOSITION = "layerwise/data/default_predictor/composition.json"
MUST_BE_QUOTED = {(COMPOSITION, "scale.fp32"), (COMPOSITION, "scale.tensor"),
                  (COMPOSITION, "kernel_ms"), (COMPOSITION, "residual")}


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def markers() -> list[tuple[str, str | None, str, str, bool]]:
    """(where, quoted number, file, key, presence only) for every marker."""
    out = []
    for page in pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for m in MARKER.finditer(line):
                where = f"{page.relative_to(REPO)}:{n}"
                out.append((where, m.group(1), m.group(2), m.group(3), bool(m.group(4))))
    return out


@cache
def shipped(path: str) -> Any:
    file = REPO / path
    assert file.is_file(), f"no shipped file {path}"
    if file.suffix == ".csv":
        with file.open(newline="") as f:
            rows = list(csv.DictReader(f))
        return {next(iter(r.values())): r for r in rows}
    return json.loads(file.read_text())


def follow(doc: Any, key: str) -> Any:
    """The value at a dotted key, or KeyError naming the part that is missing."""
    for part in key.split("."):
        if isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            raise KeyError(part)
    return doc


def test_every_quoted_shipped_figure_is_the_shipped_value():
    wrong = []
    for where, quoted, path, key, present in markers():
        try:
            value = follow(shipped(path), key)
        except KeyError as missing:
            wrong.append(f"{where}: {path} has no {key} (no {missing})")
            continue
        if present:
            continue
        if quoted is None:
            wrong.append(f"{where}: the marker for {key} follows no number")
            continue
        decimals = len(quoted.split(".")[1]) if "." in quoted else 0
        if round(float(value), decimals) != float(quoted.replace(",", "")):
            wrong.append(f"{where}: quotes {key} as {quoted}, {path} ships {float(value):.6g}")
    assert not wrong, "\n".join(wrong)


def test_the_composition_constants_are_quoted_and_checked():
    quoted = {(path, key) for _, _, path, key, _ in markers()}
    assert quoted >= MUST_BE_QUOTED, sorted(MUST_BE_QUOTED - quoted)
