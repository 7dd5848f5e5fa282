"""Deployments with links, and the all-reduce cost over them."""

from __future__ import annotations

import pytest

from fleet.deployment import Deployment
from fleet.interconnect import Interconnect, allreduce_seconds


@pytest.mark.parametrize("text, per_node, nodes, link, network", [
    ("8x A100-SXM4-40GB", 8, 1, "", ""),
    ("2x8 H100 SXM5 IB400", 8, 2, "", "ib400"),
    ("4x RTX 3090 PCIe", 4, 1, "pcie", ""),
    ("4x Quadro RTX 8000 NVLink", 4, 1, "nvlink", ""),
    ("2x4 V100 HDR", 4, 2, "", "ib200"),
    ("nvidia-a100-sxm4-40gb-x8", 8, 1, "", ""),
    ("nvidia-a100-sxm-40gb-x4-n4", 4, 4, "", ""),
    ("V100", 1, 1, "", ""),
])
def test_the_forms_people_write(text, per_node, nodes, link, network):
    d = Deployment.parse(text)
    assert (d.per_node, d.nodes, d.link, d.network) == (per_node, nodes, link, network)
    assert Deployment.parse(d.key).count == d.count  # the key keeps the counts


def test_link_words_leave_the_name_and_keep_the_key():
    assert Deployment.parse("4x RTX 3090 PCIe").key == Deployment.parse("4x RTX 3090").key
    assert Deployment.parse("2x8 H100 SXM5 IB400").key == "nvidia-h100-sxm5-x8-n2"
    assert "pcie" in Deployment.parse("4x A100 PCIe 40GB").key  # here PCIe names the part


@pytest.mark.parametrize("text, message", [
    ("0x A100", ">= 1"), ("8x", "names no accelerator"), ("", "empty"),
    ("2x8 H100 IB999", "unknown network"),
])
def test_nonsense_is_a_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        Deployment.parse(text)


def test_defaults_come_from_the_catalog_and_are_reported():
    sxm = Deployment.parse("8x A100-SXM4-40GB").interconnect()
    assert sxm.link == "nvswitch" and sxm.link_gbs == pytest.approx(300)
    assert any("nvswitch" in a for a in sxm.assumed)
    geforce = Deployment.parse("4x RTX 3090 PCIe").interconnect()
    assert geforce.link == "pcie-nop2p"
    assert any("peer-to-peer" in a for a in geforce.assumed)
    two_nodes = Deployment.parse("2x8 V100").interconnect()
    assert two_nodes.network == "ib200" and any("ib200" in a for a in two_nodes.assumed)
    assert Deployment.parse("V100").interconnect().assumed == ()  # one GPU: nothing assumed


def test_allreduce_grows_with_peers_and_shrinks_with_bandwidth():
    slow = Interconnect("pcie", 12.0)
    fast = Interconnect("nvlink", 150.0)
    nbytes = 100e6
    assert allreduce_seconds(nbytes, 1, 1, slow) == 0.0
    times = [allreduce_seconds(nbytes, n, 1, slow) for n in (2, 4, 8)]
    assert times[0] < times[1] < times[2] < 2 * nbytes / 12e9 + 1e-3  # ring: bounded by 2B/bw
    assert allreduce_seconds(nbytes, 8, 1, fast) < allreduce_seconds(nbytes, 8, 1, slow) / 10
    ib = Interconnect("nvlink", 150.0, "ib200", 25.0)
    assert allreduce_seconds(nbytes, 8, 2, ib) > allreduce_seconds(nbytes, 8, 1, ib)
    with pytest.raises(ValueError):
        allreduce_seconds(-1, 2, 1, slow)
