"""``jobcast gpus`` and ``jobcast networks``: what jobcast knows, found as a forecast finds it,
with specs and sources (issue 28)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleet.catalog import load_catalog, resolve_gpu
from jobcast.cli.app import app
from jobcast.service.features.known import find_gpus, find_networks
from layerwise import zoo
from layerwise.zoo import torch_zoo

runner = CliRunner()


def _json(*args: str):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_gpus_lists_the_catalog_and_resolves_as_a_forecast_does():
    everything = _json("gpus")
    assert [g["name"] for g in everything] == [s.name for s in load_catalog()]
    a100 = _json("gpus", "A100")  # a family: every A100 row
    assert a100 and all("A100" in g["name"] for g in a100)
    smi = _json("gpus", "Tesla V100-SXM2-16GB")  # as nvidia-smi prints it
    assert [g["name"] for g in smi] == [resolve_gpu("Tesla V100-SXM2-16GB").name]
    v100 = smi[0]
    spec = resolve_gpu(v100["name"])
    assert v100["memory_gb"] == spec.memory_gb
    assert v100["peak_tflops"]["fp32"] == spec.fp32_tflops
    assert v100["peak_tflops"]["fp16"] == spec.peak_tflops("fp16") > spec.fp32_tflops
    assert v100["architecture"] == "Volta" and "V100" in v100["source"]
    hopper = find_gpus("hopper")  # not a GPU name: matched as part of a spelling
    assert hopper and {g["architecture"] for g in hopper} == {"Hopper"}


def test_gpus_text_and_unknown_query():
    text = runner.invoke(app, ["gpus", "T4"])
    assert text.exit_code == 0 and "Tesla T4" in text.output and "16 GB" in text.output
    missing = runner.invoke(app, ["gpus", "banana"])
    assert missing.exit_code == 1 and "no GPU in the catalog matches 'banana'" in missing.output


def test_networks_lists_both_zoos_with_params_and_flops():
    everything = _json("networks")
    keras = {n["name"] for n in everything if n["framework"] == "tensorflow"}
    torch = {n["name"] for n in everything if n["framework"] == "pytorch"}
    assert keras == set(zoo.known_networks()) and torch == set(torch_zoo.known_networks())
    resnet = next(n for n in everything if n["name"] == "resnet50"
                  and n["framework"] == "tensorflow")
    assert resnet["params"] == zoo.load("resnet50").totals["params"]
    assert resnet["flops_per_sample"] == zoo.load("resnet50").totals["flops"]
    assert resnet["image_size"] == 224 and "keras" in resnet["source"]
    # an alias finds its network; a part of a name finds every match
    assert [n["name"] for n in find_networks("inception3")] == ["inceptionv3"]
    assert {n["framework"] for n in find_networks("vgg16")} == {"tensorflow", "pytorch"}
    text = runner.invoke(app, ["networks", "mobilenet"])
    assert text.exit_code == 0 and "mobilenetv2" in text.output
    missing = runner.invoke(app, ["networks", "nosuchnet"])
    assert missing.exit_code == 1 and "no shipped network matches" in missing.output
