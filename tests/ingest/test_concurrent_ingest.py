"""Several ``jobcast ingest`` processes on one SQLite store at once: no error, no traceback,
nothing lost, nothing twice (issue 13: insert-or-ignore on the content hash, busy retried)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from lambda_tree import make_tree

from ingest.pipeline import ingest_paths
from ingest.store import Store


def per_file(db: Path) -> dict[str, tuple[int, int]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select f.source, count(distinct r.id), count(s.id) from files f "
            "left join runs r on r.file_id = f.id left join segments s on s.run_id = r.id "
            "group by f.id").fetchall()
    return {source: (n_runs, n_segments) for source, n_runs, n_segments in rows}


def test_three_ingests_at_once_lose_nothing(tmp_path):
    logs = make_tree(tmp_path / "logs", 40)  # 120 files
    folder = str(tmp_path / "logs")
    clean = tmp_path / "clean.db"
    ingest_paths(Store(f"sqlite:///{clean}"), [folder])
    db = tmp_path / "shared.db"
    url = f"sqlite:///{db}"
    procs = [
        subprocess.Popen([sys.executable, "-m", "jobcast", "ingest", folder, "--store", url,
                          "--json", "--workers", workers],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for workers in ("1", "2", "1")
    ]
    outputs = [p.communicate(timeout=300) for p in procs]  # read while they run: no full pipe
    results = [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    added: list[str] = []
    for code, out, err in results:
        assert "Traceback" not in err and "IntegrityError" not in err, err
        assert code == 0, err
        payload = json.loads(out)
        assert payload["rejected"] == []
        assert len(payload["added"]) + len(payload["duplicates"]) == len(logs)
        assert payload["stored"] == len(payload["added"])
        added += [entry["source"] for entry in payload["added"]]
    assert sorted(added) == sorted(str(p) for p in logs)  # each file stored exactly once
    assert per_file(db) == per_file(clean)
