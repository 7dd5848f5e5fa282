"""Repairs: what the MLPerf parser mended in a log instead of rejecting it.

Rules
-----
* A repair is ``{"kind", "line", "detail"}`` (the run-metadata contract of issue 12): the
  kind (snake_case, one of :data:`KINDS`), the 1-based line it concerns (the first such line
  when one repair covers several) and a sentence saying what was found and what was done.
* Every repair entry in ``meta["repairs"]`` has one sentence in ``meta["warnings"]`` (read
  back by the store's ``run_warnings``): ``"line L: <detail>"`` or, for a kind met several
  times in one run, ``"N x <kind> from line L: <detail of the first> (lines ...)"``.
  Repeats of a kind collapse into one entry so a 90-epoch log with one quirk per epoch gives
  one warning, not 90.
* Repairs found while reading records (before runs are known) belong to the run whose
  lines hold them, else to the next run (header records precede their run), else to the
  last one (:meth:`Repairs.for_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS: dict[str, str] = {
    "interleaved_record": "a record found after other output on its line (ranks or tools "
                          "writing at once, terminal junk); read from where it starts",
    "out_of_order_mark": "a record that does not time training (header, parameter, "
                         "cache_clear) stamped out of order with the run's marks; its time "
                         "is ignored",
    "clock_step": "the clock of the training marks went back and stayed back (a host clock "
                  "step); a span across the step is dropped, the others kept",
    "missing_epoch_stop": "an epoch without epoch_stop, closed at the next mark (eval_start, "
                          "block_stop or the next epoch_start)",
    "mismatched_epoch_stop": "an epoch_stop numbered one past the open epoch (stops counted "
                             "in completed epochs); it closes the open epoch",
    "mismatched_block_stop": "a block_stop numbered with the epoch after the block (first + "
                             "count); it closes the open block",
    "unclosed_block": "a block_start while a block is open: the open block is closed there",
    "unclosed_eval": "an eval_start while an eval is open: the open eval is dropped",
    "duplicate_mark": "a stop repeating one already matched, or with nothing open; ignored",
    "epoch_gap": "time between epoch_stop marks and the next segment (asynchronous epoch "
                 "marks: the host logs an epoch as queued, the device finishes it later) "
                 "counted as the epochs' training",
    "cpu_from_system": "a system without accelerators: the deployment names its host CPUs "
                       "(sockets per node x nodes) from the system description",
    "samples_as_batches": "train_samples/eval_samples logged as a batch count (value x batch "
                          "is the benchmark's data set): read as iterations",
    "samples_per_accelerator": "train_samples/eval_samples logged per accelerator (value x "
                               "accelerators is the data set): iterations from their product",
    "dataset_size_used": "train_samples/eval_samples that is no count of the benchmark's data "
                         "set (not its samples, batches or samples per accelerator): the data "
                         "set's size is used",
    "epochs_in_samples": "epoch numbers and block epoch counts logged in samples (multiples of "
                         "the samples per epoch, past the benchmark's epoch cap): divided by "
                         "the samples per epoch",
    "late_block_stop": "a block_stop for a block that the next block_start already closed "
                       "(pipelined runners log it when that block's eval ends); ignored",
    "instant_eval": "an eval whose start and stop share one timestamp (evaluated "
                    "asynchronously): it times nothing and gives no test segment",
    "after_run_stop": "training records after run_stop with no new run header (the loop "
                      "finishing its block): not a run, ignored",
    "phase_overlap": "train and eval segments that cover more than run_start..run_stop "
                     "(segments outside the run's marks): gap_seconds clamped to 0",
    "phase_order": "a start-up or run mark out of order with its partner (init_start after "
                   "run_start, run_stop before run_start): that span is not stored",
}

MAX_LINES_LISTED = 6


@dataclass
class Repair:
    kind: str
    line: int | None
    detail: str


@dataclass
class Repairs:
    """Repairs in log order (one log or one run)."""

    items: list[Repair] = field(default_factory=list)

    def add(self, kind: str, line: int | None, detail: str) -> Repair:
        """Note a repair of a known ``kind`` (:data:`KINDS`) at ``line``; returns it."""
        if kind not in KINDS:
            raise ValueError(f"unknown repair kind {kind!r}")
        rep = Repair(kind, line, detail)
        self.items.append(rep)
        return rep

    def retract(self, rep: Repair) -> None:
        """Take back a repair added earlier (a later record told what really happened)."""
        self.items = [r for r in self.items if r is not rep]

    def extend(self, other: Repairs) -> None:
        """Add ``other``'s repairs after these."""
        self.items.extend(other.items)

    def for_lines(self, bounds: list[tuple[int, int]]) -> list[Repairs]:
        """Split by runs given as (first line, last line), in order (rules above)."""
        out = [Repairs() for _ in bounds]
        if not bounds:
            return out
        for rep in self.items:
            line = rep.line if rep.line is not None else bounds[0][0]
            index = next((i for i, (_, last) in enumerate(bounds) if line <= last),
                         len(bounds) - 1)
            out[index].items.append(rep)
        return out

    def to_meta(self, meta: dict[str, object]) -> None:
        """Write ``meta["repairs"]`` and append the warnings (rules above); nothing if empty."""
        if not self.items:
            return
        by_kind: dict[str, list[Repair]] = {}
        for rep in self.items:
            by_kind.setdefault(rep.kind, []).append(rep)
        entries: list[dict[str, object]] = []
        sentences: list[str] = []
        for kind, reps in by_kind.items():
            first = reps[0]
            if len(reps) == 1:
                entries.append({"kind": kind, "line": first.line, "detail": first.detail})
                where = f"line {first.line}: " if first.line is not None else ""
                sentences.append(f"{where}{first.detail}")
                continue
            lines = [r.line for r in reps if r.line is not None]
            listed = ", ".join(str(n) for n in lines[:MAX_LINES_LISTED])
            if len(lines) > MAX_LINES_LISTED:
                listed += f", ... ({len(lines)} in all)"
            detail = f"{len(reps)} x: {first.detail}; the same at lines {listed}"
            entries.append({"kind": kind, "line": first.line, "detail": detail})
            sentences.append(f"{len(reps)} x {kind} from line {first.line}: {first.detail} "
                             f"(lines {listed})")
        meta["repairs"] = entries
        warnings = meta.setdefault("warnings", [])
        if isinstance(warnings, list):
            warnings.extend(sentences)
