"""MLPerf system descriptions: find and load the one beside a result log, read it.

Layout of the mlcommons ``training_results_vX.Y`` repositories::

    <submitter>/results/<system>/<benchmark>/result_N.txt
    <submitter>/systems/<system>.json              v0.6 on
    <submitter>/results/<system>/entry.json        v0.5 (submitter folder: nvidia/submission)

Folder names may contain spaces. The system file is JSON, except v0.6's, which holds
``key: {"value": ..., "metadata": ...}`` lines whose ``entry`` value is a Python dict
literal (itself holding a ``nodes`` dict literal); both are decoded here into one dict.
The context (:class:`MlperfContext`) holds the description (``system``), the file it came
from (``described_in``) and the facts the path gives: ``version`` (e.g. ``"v0.7"`` from a
folder ``v0.7`` or ``training_results_v0.7``) and ``submitter``, set where the description
was found. A log outside this layout, or one whose system file is missing, gets a context
without ``system`` (the parser then leaves ``deployment`` empty).

What the description gives a run
--------------------------------
* Deployment (:func:`system_deployment`): v0.7+ ``accelerator_model_name`` /
  ``accelerators_per_node`` / ``number_of_nodes``; v0.5/v0.6 ``nodes[]`` of the entry.
  Keys are compared lower-case with spaces as ``_``; a trailing parenthesised note of the
  accelerator name is dropped; a bare ``TPU`` takes its generation from the system name.
  Missing counts or heterogeneous nodes give no deployment.
* CPU-only systems (:func:`cpu_deployment`: ``accelerators_per_node`` 0 or no accelerator
  name, as Intel's Xeon submissions): the deployment names the host CPU
  (``host_processor_model_name`` without ``(R)``/``(TM)``/``CPU``/``@ clock``/``code named``)
  x ``host_processors_per_node`` (sockets) x ``number_of_nodes``.
* Framework (:func:`system_framework`): ``framework``; when it lists several stacks, the
  one the log's text names is kept, else the whole string (:func:`lists_several_stacks`).
* System name (:func:`system_name`): ``<submitter>/<system>`` from the folder layout, else
  the description's ``submitter``/``system_name``, else the log's ``submission_org`` /
  ``submission_platform``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from fleet.deployment import Deployment
from fleet.names import without_note
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


def is_system_file(path: Path) -> bool:
    """A system description of the layout (``<submitter>/systems/<system>.json``, v0.5's
    ``results/<system>/entry.json``): read beside a log, never a log itself."""
    return path.suffix.lower() == ".json" and (
        path.parent.name == "systems"
        or (path.name == "entry.json" and path.parent.parent.name == "results"))


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


@dataclass(frozen=True)
class MlperfContext(ParseContext):
    """The context of a result log in the MLPerf layout: ``system`` is its system
    description as loaded, ``described_in`` that file; ``submitter`` and ``version`` (the
    round, e.g. ``"v0.7"``) are the facts the path gives, set where the description was
    found."""

    submitter: str | None = None
    version: str | None = None


def context_for(path: Path) -> ParseContext:
    """Parse context for one MLPerf result log: its system description (if found) with
    the facts of the path, and the benchmark and system folder names."""
    path = Path(path)
    parts = layout_parts(path)
    if parts is None:
        return ParseContext(source=str(path))
    system_path = system_file_for(path)
    if system_path is None:
        return MlperfContext(source=str(path), folder_network=parts["benchmark"],
                             folder_system=parts["system"])
    return MlperfContext(
        source=str(path),
        system=load_system(system_path),
        described_in=str(system_path),
        folder_network=parts["benchmark"],
        folder_system=parts["system"],
        submitter=parts["submitter"],
        version=parts.get("version"),
    )


def _count(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw > 0 else None
    if isinstance(raw, float):
        return int(raw) if raw > 0 and raw == int(raw) else None
    if isinstance(raw, str) and re.fullmatch(r"\s*\d+\s*", raw):
        return int(raw) if int(raw) > 0 else None
    return None


_NORMALISED = "_keys_normalised"


def norm_keys(d: dict) -> dict:
    """Keys lower-case, stripped, spaces as ``_`` (a dict from :func:`normalised` as is)."""
    if d.get(_NORMALISED) is True:
        return d
    return {str(k).strip().lower().replace(" ", "_"): v for k, v in d.items()}


def normalised(system: dict) -> dict:
    """:func:`norm_keys` once, marked so that the readers here do not normalise again."""
    return {**norm_keys(system), _NORMALISED: True}


def _clean_accelerator(name: str) -> str:
    """The accelerator name without its trailing note (:func:`fleet.names.without_note`)."""
    return without_note(name)


def _with_generation(name: str, system_name: object) -> str:
    """A bare ``"TPU"`` takes its generation from the system name (``tpu-v4-128`` -> ``TPU v4``),
    so different TPU generations never share a deployment key."""
    if name.strip().lower() == "tpu" and isinstance(system_name, str):
        m = re.search(r"tpu[-_ ]?(v\d+\w*)", system_name, flags=re.I)
        if m:
            return f"TPU {m.group(1).lower()}"
    return name


def system_deployment(system: dict | None) -> Deployment | None:
    """Deployment from a system description: v0.7+ ``accelerator_model_name`` /
    ``accelerators_per_node`` / ``number_of_nodes`` (also ``number of nodes``); v0.5
    ``entry.json`` ``nodes[].accelerator`` / ``num_accelerators`` / ``num_nodes``; v0.6
    ``entry`` (decoded by :func:`load_system`) with the same ``nodes``."""
    if not system:
        return None
    norm = norm_keys(system)
    if isinstance(norm.get("accelerator_model_name"), str):
        name = _with_generation(
            _clean_accelerator(norm["accelerator_model_name"]), norm.get("system_name")
        )
        per_node = _count(norm.get("accelerators_per_node"))
        nodes = _count(norm.get("number_of_nodes"))
        if name and per_node and nodes:
            return Deployment(name, per_node, nodes)
        return None
    got = norm.get("entry")
    entry = got if isinstance(got, dict) else norm
    node_specs = norm_keys(entry).get("nodes")
    if isinstance(node_specs, dict):
        node_specs = [node_specs]
    if not isinstance(node_specs, list) or not node_specs:
        return None
    specs = [norm_keys(s) for s in node_specs if isinstance(s, dict)]
    names = {s.get("accelerator") for s in specs}
    per = {_count(s.get("num_accelerators")) for s in specs}
    if len(names) != 1 or len(per) != 1:
        return None  # heterogeneous nodes: no single deployment
    node_name, node_per = names.pop(), per.pop()
    node_counts = [_count(s.get("num_nodes", 1)) for s in specs]
    if not isinstance(node_name, str) or not node_per or None in node_counts:
        return None
    nodes_total = sum(c for c in node_counts if c is not None)  # none is None here
    return Deployment(_clean_accelerator(node_name), node_per, nodes_total)


def cpu_deployment(system: dict | None) -> Deployment | None:
    """The host CPUs of a system without accelerators (rules in the module doc), else None."""
    if not system:
        return None
    norm = norm_keys(system)
    per = norm.get("accelerators_per_node")
    name = norm.get("accelerator_model_name")
    no_accelerator = (per in (0, "0") or (isinstance(per, str) and not per.strip())
                      or not isinstance(name, str)
                      or name.strip().lower() in ("", "n/a", "na", "none", "-"))
    if not no_accelerator:
        return None
    cpu = norm.get("host_processor_model_name")
    sockets = _count(norm.get("host_processors_per_node"))
    nodes = _count(norm.get("number_of_nodes"))
    if not isinstance(cpu, str) or not sockets or not nodes:
        return None
    clean = re.sub(r"\((?:R|TM)\)|\bCPU\b|@\s*[\d.]+\s*[GM]Hz|\bcode named\b", " ", cpu,
                   flags=re.I)
    clean = " ".join(clean.split())
    return Deployment(clean, sockets, nodes) if clean else None


def system_name(system: dict | None, submitter: str | None, folder: str | None,
                logged_org: object = None, logged_platform: object = None) -> str | None:
    """``<submitter>/<system>`` (rules in the module doc); None when nothing names it."""
    norm = norm_keys(system) if system else {}
    who = submitter or norm.get("submitter") or logged_org
    what = folder or norm.get("system_name") or logged_platform
    if not isinstance(what, str) or not what.strip():
        return None
    what = what.strip()
    return f"{str(who).strip()}/{what}" if isinstance(who, str) and who.strip() else what


def lists_several_stacks(system: dict | None) -> bool:
    """Whether the description's ``framework`` lists more than one stack."""
    if not system:
        return False
    norm = norm_keys(system)
    raw = norm.get("framework")
    if raw is None and isinstance(norm.get("entry"), dict):
        raw = norm_keys(norm["entry"]).get("framework")
    return isinstance(raw, str) and len([p for p in re.split(r"[,;]", raw) if p.strip()]) > 1


def system_framework(system: dict | None, evidence: set[str] | frozenset = frozenset()
                     ) -> str | None:
    """``framework`` of the system description. Some list several stacks
    (``"NGC MXNet 20.06 , NGC PyTorch 20.06"``): the one the log's text names is kept,
    the whole string when that is not exactly one."""
    if not system:
        return None
    norm = norm_keys(system)
    raw = norm.get("framework")
    if raw is None and isinstance(norm.get("entry"), dict):
        raw = norm_keys(norm["entry"]).get("framework")
    if not isinstance(raw, str) or not raw.strip():
        return None
    items = [p.strip() for p in re.split(r"\s*[,;]\s*", raw) if p.strip()]
    if len(items) > 1:
        def token(item: str) -> str | None:
            low = item.lower()
            for name, tok in (("mxnet", "mxnet"), ("pytorch", "pytorch"),
                              ("tensorflow", "tensorflow")):
                if name in low:
                    return tok
            return None

        hits = [item for item in items if token(item) in evidence]
        if len(hits) == 1:
            return hits[0]
    return raw.strip()
