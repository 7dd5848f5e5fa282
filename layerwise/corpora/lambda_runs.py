"""Reader for Lambda's tf_cnn_benchmarks logs (LambdaColdStorage/lambda-tensorflow-benchmark).

Layout under ``root``::

    <cpu>-<gpu>[_options].logs/metadata       (tab-separated: CPU, GPU 0 <name>, TF, ...)
    <cpu>-<gpu>[_options].logs/<config>/<network>-<B>/throughput/<rep>

The folder names are read by :mod:`fleet.lambda_layout` (the rules are stated there); a
config folder outside what Lambda published (``ConfigFolder.published``: ``replicated`` or
``parameter_server``, ``fp16`` or ``fp32``, at least one GPU) is reported as unexpected.
System options in the directory name: ``NVLink``, ``XLA``, ``trt``/``trt2`` (two test
rounds), ``TF1_15``/``TF2_2``, ``HP16``, ``LambdaCloud``.

Rules (checked on all 2,188 logs of the public corpus):

* ``<B>`` in the network directory is the batch **per GPU**, not the global batch: the log
  header says ``Batch size: <B*N> global`` / ``<B> per device`` for every multi-GPU run. So
  ``batch_per_gpu`` = the header's per-device value (else ``B``) and ``global_batch`` = the
  header's global value (else ``B * N``). A header that disagrees with the directory (batch,
  device count, model, mode, dataset) is reported in ``problems``; the header wins.
* ``images_per_sec`` is the last ``total images/sec: X`` line (global images, all GPUs);
  ``step_seconds`` = ``global_batch / images_per_sec``, the wall time of one synchronous step.
  A log without a finite, positive total gets no row and one problem ``"<file>: <reason>"``.
* ``step_images_per_sec_median`` is the median of the ``<step>\\timages/sec: X +/- ...`` lines
  (tf_cnn_benchmarks prints a running mean there, steps 1, 10, ..., 100); NaN if none.
* ``xla`` is True when the log says ``Compiled cluster using XLA`` (XLA really ran); the name's
  ``XLA`` flag is kept as ``xla_in_name``. They disagree for the real-data runs of
  ``..._NVLink_XLA_trt2_TF1_15`` (no XLA compilation logged); one problem line per system.
* ``tf_version`` comes from ``metadata`` (the header's ``TensorFlow:`` agrees with it); a
  system name whose ``TF<a>_<b>`` disagrees (``..._NVLink_XLA_trt_TF2_2`` ran TF 1.15.3) gets
  one problem line. ``gpu`` is ``GPU 0`` from ``metadata`` as printed (None without one).
* ``loss_nan``: some step line printed a ``nan`` loss (diverged; the timing is still valid).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import TypedDict

import pandas as pd

from fleet import lambda_layout as layout

COLUMNS = (
    "system", "gpu", "gpu_count", "precision", "data", "mode", "distortions", "variable_update",
    "xla", "xla_in_name", "nvlink", "tf_version", "network", "global_batch", "batch_per_gpu",
    "rep", "images_per_sec", "step_seconds", "step_images_per_sec_median", "loss_nan",
    "header_global_batch", "header_batch_per_gpu", "header_devices", "file",
)
SUMMARY_KEYS = (
    "gpu", "system", "precision", "data", "mode", "gpu_count", "network", "batch_per_gpu", "xla",
    "distortions", "variable_update",
)

_TOTAL = re.compile(rb"^total images/sec:[ \t]*(\S+)[ \t]*\r?$", re.M)
_STEP = re.compile(rb"^\d+\timages/sec:[ \t]*(\S+)[ \t]+\+/-(?P<tail>[^\n]*)$", re.M)
_BATCH = re.compile(rb"^Batch size:\s+(\d+)\s+global\s*\n\s*(\d+)\s+per device", re.M)
_HEADER = {
    key: re.compile(rb"^" + key.encode() + rb":[ \t]+([^\r\n]*?)[ \t]*\r?$", re.M)
    for key in ("TensorFlow", "Model", "Mode", "Dataset", "Devices", "Variables")
}
_XLA_RAN = b"Compiled cluster using XLA"
_NAN = re.compile(rb"(?:^|[\t ])-?nan(?:[\t ]|$)", re.I)
_MODES = {"training": "training", "forward only": "inference"}
_DATASETS = {"imagenet (synthetic)": "syn", "imagenet": "real"}


def read_metadata(path: Path) -> dict[str, str]:
    """``metadata`` as key -> value (:func:`fleet.lambda_layout.parse_metadata`)."""
    return layout.parse_metadata(path.read_text(encoding="utf-8", errors="replace"))


def parse_config(name: str) -> dict[str, object] | None:
    """``syn-replicated-fp32-4gpus-inference`` -> data, variable_update, precision, gpu_count,
    mode, distortions; None if the name does not follow the layout."""
    cfg = layout.parse_config(name)
    if cfg is None or not cfg.published:
        return None
    return {
        "data": cfg.data, "variable_update": cfg.update, "precision": cfg.precision,
        "gpu_count": cfg.gpus, "mode": cfg.mode, "distortions": cfg.distortions,
    }


def _finite_positive(raw: bytes) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


class LogNumbers(TypedDict):
    """What :func:`parse_log` reads from one log (a plain dict at run time)."""

    total: str | None
    images_per_sec: float | None
    step_median: float | None
    loss_nan: bool
    xla_ran: bool
    tf: str | None
    model: str | None
    mode: str | None
    dataset: str | None
    variables: str | None
    devices: int | None
    global_batch: int | None
    per_device: int | None


def parse_log(text: bytes) -> LogNumbers:
    """The numbers of one tf_cnn_benchmarks log (bytes); absent values are None.

    Keys: ``total`` (last ``total images/sec``, raw string), ``images_per_sec`` (finite and
    positive, else None), ``step_median``, ``loss_nan``, ``xla_ran``, and the header's
    ``tf``, ``model``, ``mode``, ``dataset``, ``variables``, ``devices`` (count),
    ``global_batch``, ``per_device``.
    """
    start = text.find(b"TensorFlow:")  # the header block, before any step line
    end = text.find(b"==========", start) if start >= 0 else -1
    head = b"" if start < 0 else text[start:end] if end > start else text[start:start + 4096]
    first = text.find(b"images/sec:")  # the first step line (or the total), then the rest
    body = b"" if first < 0 else text[text.rfind(b"\n", 0, first) + 1:]
    totals = _TOTAL.findall(body)
    step_lines = _STEP.findall(body)
    steps = [v for raw, _ in step_lines if (v := _finite_positive(raw)) is not None]
    header = {k: (m[1].decode("utf-8", "replace") if (m := rx.search(head)) else None)
              for k, rx in _HEADER.items()}
    batch = _BATCH.search(head)
    devices = header["Devices"]
    return {
        "total": totals[-1].decode("utf-8", "replace") if totals else None,
        "images_per_sec": _finite_positive(totals[-1]) if totals else None,
        "step_median": statistics.median(steps) if steps else None,
        "loss_nan": any(_NAN.search(tail) for _, tail in step_lines),
        "xla_ran": _XLA_RAN in text,
        "tf": header["TensorFlow"], "model": header["Model"], "mode": header["Mode"],
        "dataset": header["Dataset"], "variables": header["Variables"],
        "devices": devices.count("gpu:") if devices is not None else None,
        "global_batch": int(batch[1]) if batch else None,
        "per_device": int(batch[2]) if batch else None,
    }


def _int_or(value: object, default: int) -> int:
    """``value`` when it is a positive int, else ``default``."""
    return value if isinstance(value, int) and value > 0 else default


def _header_checks(log: LogNumbers, cfg: dict[str, object], network: str,
                   batch: int) -> list[str]:
    """Where the header disagrees with the directory names (empty when it agrees or is absent)."""
    n = _int_or(cfg["gpu_count"], 0)  # a published config folder has at least one GPU
    out = []
    if log["model"] is not None and log["model"] != network:
        out.append(f"header model {log['model']} != directory {network}")
    if log["mode"] is not None and _MODES.get(str(log["mode"])) != cfg["mode"]:
        out.append(f"header mode {log['mode']!r} != {cfg['mode']}")
    if log["dataset"] is not None and _DATASETS.get(str(log["dataset"])) != cfg["data"]:
        out.append(f"header dataset {log['dataset']!r} != {cfg['data']}")
    if log["variables"] is not None and log["variables"] != cfg["variable_update"]:
        out.append(f"header variables {log['variables']} != {cfg['variable_update']}")
    if log["devices"] is not None and log["devices"] != n:
        out.append(f"header lists {log['devices']} devices, directory says {n}")
    if log["per_device"] is not None and log["per_device"] != batch:
        out.append(f"header {log['per_device']} per device != directory batch {batch}")
    if log["global_batch"] is not None and log["per_device"] is not None:
        count = log["devices"] or n
        if log["global_batch"] != log["per_device"] * count:
            out.append(f"header global {log['global_batch']} != {log['per_device']} x {count}")
    return out


def _read_system(root: Path, system_dir: Path, problems: list[str]) -> list[dict[str, object]]:
    """Rows of one ``*.logs`` directory; problems appended (never raises for one bad file)."""
    system = system_dir.name
    folder = layout.parse_system(system)
    meta_path = system_dir / layout.METADATA
    meta: dict[str, str] = {}
    if meta_path.is_file():
        try:
            meta = read_metadata(meta_path)
        except OSError as exc:
            problems.append(f"{system}/metadata: unreadable ({exc})")
    else:
        problems.append(f"{system}: no metadata (gpu and tf_version unknown)")
    gpu = meta.get("GPU 0")
    tf_version = meta.get("TF")
    name_tf = folder.tf_version
    if name_tf and tf_version and not tf_version.startswith(name_tf):
        problems.append(f"{system}: name says TF {name_tf} but metadata says TF "
                        f"{tf_version} (tf_version follows metadata)")
    xla_in_name = folder.xla
    nvlink = folder.nvlink
    rows: list[dict[str, object]] = []
    for path in sorted(system_dir.glob(f"*/*/{layout.THROUGHPUT}/*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        cfg = parse_config(path.parents[2].name)
        net = layout.parse_network(path.parents[1].name)
        if cfg is None or net is None:
            problems.append(f"{rel}: unexpected config or network directory name")
            continue
        if not path.name.isdigit():
            problems.append(f"{rel}: repetition name is not a number")
            continue
        try:
            log = parse_log(path.read_bytes())
        except OSError as exc:
            problems.append(f"{rel}: unreadable ({exc})")
            continue
        if log["total"] is None:
            problems.append(f"{rel}: no 'total images/sec' line (run truncated or failed)")
            continue
        ips = log["images_per_sec"]
        if ips is None:
            problems.append(f"{rel}: total images/sec {log['total']!r} is not finite and positive")
            continue
        batch = net.batch
        for reason in _header_checks(log, cfg, net.network, batch):
            problems.append(f"{rel}: {reason}")
        n = _int_or(log["devices"], _int_or(cfg["gpu_count"], 0))
        per_gpu = _int_or(log["per_device"], batch)
        global_batch = _int_or(log["global_batch"], per_gpu * n)
        if batch <= 0 or per_gpu <= 0 or global_batch <= 0:
            problems.append(f"{rel}: batch size is not positive")
            continue
        if log["tf"] and tf_version and not tf_version.startswith(str(log["tf"])):
            problems.append(f"{rel}: header TensorFlow {log['tf']} != metadata TF {tf_version}")
        rows.append({
            "system": system, "gpu": gpu, "gpu_count": n, "precision": cfg["precision"],
            "data": cfg["data"], "mode": cfg["mode"], "distortions": cfg["distortions"],
            "variable_update": cfg["variable_update"], "xla": bool(log["xla_ran"]),
            "xla_in_name": xla_in_name, "nvlink": nvlink, "tf_version": tf_version,
            "network": net.network, "global_batch": global_batch, "batch_per_gpu": per_gpu,
            "rep": int(path.name), "images_per_sec": ips, "step_seconds": global_batch / ips,
            "step_images_per_sec_median": log["step_median"], "loss_nan": log["loss_nan"],
            "header_global_batch": log["global_batch"], "header_batch_per_gpu": log["per_device"],
            "header_devices": log["devices"], "file": rel,
        })
    off = sum(r["xla"] != xla_in_name for r in rows)
    if off:
        said = "named XLA but" if xla_in_name else "not named XLA but"
        did = "no XLA compilation" if xla_in_name else "XLA compilation"
        problems.append(f"{system}: {said} {off} of {len(rows)} logs show {did} "
                        "(xla follows the logs)")
    return rows


def _system_dirs(root: Path) -> Iterable[Path]:
    """Sub-directories holding a ``metadata`` file or named ``*.logs``."""
    return (p for p in sorted(root.iterdir())
            if p.is_dir() and (layout.is_system_folder(p.name)
                               or (p / layout.METADATA).is_file()))


def read_lambda(root: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per log with a usable total (columns :data:`COLUMNS`) and the problem lines.

    Raises only when ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"lambda benchmark folder {root} not found")
    problems: list[str] = []
    rows: list[dict[str, object]] = []
    for system_dir in _system_dirs(root):
        rows.extend(_read_system(root, system_dir, problems))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("gpu_count", "global_batch", "batch_per_gpu", "rep"):
        frame[col] = frame[col].astype("int64")
    for col in ("header_global_batch", "header_batch_per_gpu", "header_devices"):
        frame[col] = frame[col].astype("Int64")
    for col in ("images_per_sec", "step_seconds", "step_images_per_sec_median"):
        frame[col] = frame[col].astype("float64")
    for col in ("distortions", "xla", "xla_in_name", "nvlink", "loss_nan"):
        frame[col] = frame[col].astype(bool)
    return frame, problems


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Median over repetitions per :data:`SUMMARY_KEYS` (distortions and variable_update are
    kept apart too: they change the work). Columns: the keys, ``tf_version``, ``nvlink``,
    ``global_batch``, ``reps``, and the medians of ``images_per_sec``, ``step_seconds`` and
    ``step_images_per_sec_median``."""
    keys = list(SUMMARY_KEYS)
    if frame.empty:
        return pd.DataFrame(columns=keys + [
            "tf_version", "nvlink", "global_batch", "reps", "images_per_sec", "step_seconds",
            "step_images_per_sec_median"])
    grouped = frame.groupby(keys, dropna=False, sort=True)
    out = grouped.agg(
        tf_version=("tf_version", "first"), nvlink=("nvlink", "first"),
        global_batch=("global_batch", "first"), reps=("rep", "size"),
        images_per_sec=("images_per_sec", "median"), step_seconds=("step_seconds", "median"),
        step_images_per_sec_median=("step_images_per_sec_median", "median"),
    )
    return out.reset_index()
