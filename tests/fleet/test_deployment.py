"""fleet: one GPU-name normalisation, one deployment key format."""

from __future__ import annotations

import pytest

from fleet.catalog import resolve_gpu
from fleet.deployment import Deployment, deployment_key, normalise_deployment
from fleet.names import accelerator_slug, gpu_words, lookup_key


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Tesla V100-SXM2-16GB", "nvidia-v100-sxm2-16gb"),
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
        ("GeForce GTX 1080 Ti", "nvidia-gtx-1080-ti"),
        ("Quadro RTX 8000", "nvidia-rtx-8000"),
        ("Intel Gaudi2", "habana-gaudi2"),
        ("TPU v4", "google-tpu-v4"),
        ("AMD Instinct MI250", "amd-instinct-mi250"),
    ],
)
def test_slugs(name, slug):
    assert accelerator_slug(name) == slug
    assert accelerator_slug(slug) == slug  # a slug is its own slug: keys are stable


def test_catalog_lookup_and_slug_share_the_words():
    for spelling in ("NVIDIA Tesla V100-SXM2-16GB", "Tesla V100 SXM2 16GB", "v100-sxm2-16gb"):
        assert lookup_key(spelling) == "v100sxm216gb"
        assert accelerator_slug(spelling).split("-", 1)[1] == "-".join(gpu_words(spelling))
    # a store key's accelerator part resolves in the catalog like the name it came from
    assert resolve_gpu(accelerator_slug("Tesla V100-SXM2-16GB")) == resolve_gpu("V100 SXM2 16GB")


@pytest.mark.parametrize(
    ("text", "key", "count"),
    [
        ("nvidia-a100-sxm4-80gb-x8", "nvidia-a100-sxm4-80gb-x8", 8),
        # a key written with MLPerf's spelling comes back as the GPU's canonical key
        ("nvidia-a100-sxm-40gb-x4-n4", "nvidia-a100-sxm4-40gb-x4-n4", 16),
        ("8x A100-SXM4-80GB", "nvidia-a100-sxm4-80gb-x8", 8),
        ("8 × V100", "nvidia-v100-x8", 8),
        ("V100", "nvidia-v100-x1", 1),
    ],
)
def test_deployment_parse_and_format(text, key, count):
    dep = Deployment.parse(text)
    assert dep.key == key and dep.count == count
    assert normalise_deployment(text) == key
    assert Deployment.parse(dep.key) == Deployment.parse(key)  # round trip


def test_deployment_rejects_empty_and_zero_counts():
    with pytest.raises(ValueError, match=">= 1"):
        Deployment("V100", 0)
    with pytest.raises(ValueError, match=">= 1"):
        deployment_key("V100", 8, 0)
    with pytest.raises(ValueError, match="empty"):
        Deployment.parse("   ").key  # noqa: B018
