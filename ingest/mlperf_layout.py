"""Find and load the system description that sits beside an MLPerf result log.

Layout of the mlcommons ``training_results_vX.Y`` repositories::

    <submitter>/results/<system>/<benchmark>/result_N.txt
    <submitter>/systems/<system>.json              v0.6 on
    <submitter>/results/<system>/entry.json        v0.5 (submitter folder: nvidia/submission)

Folder names may contain spaces. The system file is JSON, except v0.6's, which holds
``key: {"value": ..., "metadata": ...}`` lines whose ``entry`` value is a Python dict
literal (itself holding a ``nodes`` dict literal); both are decoded here into one dict.
Facts the path gives are added under ``_mlperf_*`` keys: ``_mlperf_version`` (e.g.
``"v0.7"`` from a folder ``v0.7`` or ``training_results_v0.7``), ``_mlperf_submitter``,
``_mlperf_system_file``. A log outside this layout, or one whose system file is missing,
gets a context without ``system`` (the parser then leaves ``deployment`` empty).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ingest.events import ParseContext, ParseError

_VERSION = re.compile(r"(?:^|[_\s-])v(\d+\.\d+)(?:\.\d+)?$", re.IGNORECASE)
_V06_LINE = re.compile(r"^(\w+): (\{.*\})\s*$")


def layout_parts(log: Path) -> dict[str, str] | None:
    """``submitter``, ``system``, ``benchmark``, ``results_dir`` (and ``version`` when a
    folder names it) for a log at ``.../<submitter>/results/<system>/<benchmark>/<file>``."""
    parts = log.parts
    if len(parts) < 5 or parts[-4] != "results":
        return None
    submitter_index = len(parts) - 5
    submitter = parts[submitter_index]
    if submitter == "submission" and submitter_index > 0:  # v0.5: <org>/submission/results
        submitter = parts[submitter_index - 1]
    found = {
        "submitter": submitter,
        "system": parts[-3],
        "benchmark": parts[-2],
        "results_dir": str(Path(*parts[:-3])),
    }
    for part in reversed(parts[:submitter_index]):
        m = _VERSION.search(part)
        if m:
            found["version"] = f"v{m.group(1)}"
            break
    return found


def system_file_for(log: Path) -> Path | None:
    """The system description of a log in the MLPerf layout, if it exists."""
    parts = layout_parts(log)
    if parts is None:
        return None
    results = Path(parts["results_dir"])
    candidates = [
        results.parent / "systems" / f"{parts['system']}.json",
        results / parts["system"] / "entry.json",
    ]
    return next((c for c in candidates if c.is_file()), None)


def load_system(path: Path) -> dict:
    """Read a system description (JSON, or v0.6's ``key: {json}`` lines) into a dict."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"system description is not UTF-8 text: {exc.reason}",
                         source=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        data = _v06_system(text)
        if data is None:
            raise ParseError(f"system description is not valid JSON: {exc.msg} "
                             f"(column {exc.colno})", line=exc.lineno, source=str(path)) from None
    if not isinstance(data, dict):
        raise ParseError(f"system description is a JSON {type(data).__name__}, not an object",
                         source=str(path))
    return data


def _v06_system(text: str) -> dict | None:
    """v0.6 system file: one ``key: {"value": ...}`` line per field; None if not that."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    data: dict[str, object] = {}
    for line in lines:
        m = _V06_LINE.match(line)
        if not m:
            return None
        try:
            payload = json.loads(m.group(2))
        except json.JSONDecodeError:
            return None
        if not isinstance(payload, dict):
            return None
        data[m.group(1)] = payload.get("value")
    entry = data.get("entry")
    if isinstance(entry, str):
        decoded = _literal_dict(entry)
        if decoded is not None:
            for key in ("nodes", "libraries"):
                if isinstance(decoded.get(key), str):
                    inner = _literal_dict(decoded[key])
                    if inner is not None:
                        decoded[key] = inner
            data["entry"] = decoded
    return data


def _literal_dict(text: str) -> dict | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def context_for(path: Path) -> ParseContext:
    """Parse context for one MLPerf result log: its system description (if found) with
    the ``_mlperf_*`` facts of the path, and the benchmark and system folder names."""
    path = Path(path)
    parts = layout_parts(path)
    if parts is None:
        return ParseContext(source=str(path))
    system_path = system_file_for(path)
    system = None
    if system_path is not None:
        system = load_system(system_path)
        system["_mlperf_submitter"] = parts["submitter"]
        system["_mlperf_system_file"] = str(system_path)
        if "version" in parts:
            system["_mlperf_version"] = parts["version"]
    return ParseContext(
        source=str(path),
        system=system,
        folder_network=parts["benchmark"],
        folder_system=parts["system"],
    )
