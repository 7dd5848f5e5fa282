"""Fuzz the PyTorch-era history parsers with mutations of their real samples.

The samples (tests/data/frameworks, provenance there) with the flags a user would pass, and
a seeded run of benchmarks/fuzz_parsers.py's mutations and checks over them: per format the
cases that crashed (must be 0; a parser exception the pipeline's safety net caught counts),
were rejected (and how many name a line), were stored, and were stored with nonsense (must be
0). tests/ingest/test_fuzz_history_b.py drives the same samples from hypothesis.

    .venv/bin/python benchmarks/fuzz_history_b.py [--cases 300] [--seed 13]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _load_fuzz():
    path = REPO / "benchmarks" / "fuzz_parsers.py"
    name = "jobcast_fuzz_parsers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


FUZZ = _load_fuzz()
FRAMES = REPO / "tests" / "data" / "frameworks"
_s = FUZZ._s
CPU = "1x cpu"

SAMPLES: dict[str, list] = {
    "torchvision": [
        _s(FRAMES / "torchvision_ref" / "detection_finetune.txt", deployment=CPU,
           network="maskrcnn", batch_size=2),
        _s(FRAMES / "torchvision_ref" / "habana_resnet50_8proc.txt", deployment="8x Gaudi"),
    ],
    "timm": [_s(FRAMES / "timm_train" / "general_backbone_train.txt", deployment=CPU)],
    "lightning": [_s(FRAMES / "lightning_bars" / "tqdm" / "train.log", deployment=CPU),
                  _s(FRAMES / "lightning_bars" / "rich" / "train.log", deployment=CPU)],
    "hf_trainer": [_s(FRAMES / "hf_trainer" / "trainer_state.json", deployment=CPU,
                      network="tinycnn")],
    "mmengine": [
        _s(FRAMES / "mmengine_run" / "20230605_200941" / "20230605_200941.log",
           deployment=CPU, network="rtmpose-s"),
        _s(FRAMES / "mmengine_run" / "scalars_only" / "vis_data" / "scalars.json",
           deployment="1x V100", network="resnet18"),
    ],
    "detectron2": [_s(FRAMES / "detectron2_out" / "output" / "metrics.json", deployment=CPU,
                      network="mask_rcnn_r50_fpn", batch_size=2)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300, help="cases per format")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    FUZZ.SAMPLES.update(SAMPLES)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in SAMPLES:
            counts, examples = FUZZ.fuzz(fmt, args.cases, args.seed, Path(tmp))
            results[fmt] = {"counts": dict(counts), "examples": examples}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
