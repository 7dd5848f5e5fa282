"""A Lambda-layout log tree built from the bundled sample, shared by the ingest tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from paths import DATA

SYSTEM = "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15.logs"
SAMPLE = DATA / "lambda_sample" / SYSTEM


def make_tree(root: Path, copies: int) -> list[Path]:
    """``copies`` distinct logs per sample log of the Lambda layout (a line appended to each
    makes its content new), with the sample metadata beside them."""
    out = []
    (root / SYSTEM).mkdir(parents=True)
    shutil.copy(SAMPLE / "metadata", root / SYSTEM / "metadata")
    for log in sorted(SAMPLE.glob("*/*/throughput/1")):
        text = log.read_text()
        for i in range(copies):
            target = root / SYSTEM / log.relative_to(SAMPLE).parent / str(i + 1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"{text}copy {i}\n")
            out.append(target)
    return out
