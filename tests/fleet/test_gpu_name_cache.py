"""GPU names are resolved once per spelling (issue 35, cause 5): an ingest of a year of a
cluster asks :func:`fleet.catalog.resolve_gpu` the same few spellings hundreds of thousands
of times, and an unknown one cost a difflib search of every catalog name each time. The
cache is keyed on the spelling with blanks and case aside, answers unknown names with the
caller's own spelling, and is cleared when the catalog changes (:func:`register_gpu`)."""

from __future__ import annotations

import pytest

from fleet import catalog
from fleet.catalog import UnknownGpuError, register_gpu, resolve_gpu, unregister_gpu

ROW = {
    "name": "Cache Z900", "aliases": "Z900", "architecture": "Toyarch",
    "compute_capability": "13.0", "segment": "datacenter", "memory_gb": 96,
    "memory_type": "HBM4", "bandwidth_gbs": 4000, "boost_clock_mhz": 2000, "sm_count": 160,
    "cuda_cores": 20480, "fp32_tflops": 80, "release_year": 2027, "form_factor": "pcie",
}


def test_one_lookup_per_spelling_and_the_same_row_back():
    catalog._members.cache_clear()
    first = resolve_gpu("NVIDIA A100-SXM4-80GB")
    again = [resolve_gpu(s) for s in ("NVIDIA A100-SXM4-80GB", " nvidia  a100-sxm4-80gb ")]
    info = catalog._members.cache_info()
    assert all(spec is first for spec in again)
    assert (info.misses, info.hits) == (1, 2)


def test_an_unknown_name_is_searched_once_and_named_as_asked():
    catalog._members.cache_clear()
    with pytest.raises(UnknownGpuError) as one:
        resolve_gpu("Zorblax A100x")
    with pytest.raises(UnknownGpuError) as two:
        resolve_gpu("zorblax  a100X")
    assert catalog._members.cache_info().misses == 1
    assert "'Zorblax A100x'" in str(one.value) and "'zorblax  a100X'" in str(two.value)
    assert one.value.suggestions == two.value.suggestions
    assert one.value.suggestions is not two.value.suggestions  # a caller's copy each


def test_registering_a_gpu_clears_the_cache():
    with pytest.raises(UnknownGpuError):
        resolve_gpu("Z900")  # cached as unknown
    spec = register_gpu(ROW)
    try:
        assert resolve_gpu("Z900") is spec and resolve_gpu("cache z900") is spec
    finally:
        unregister_gpu("Cache Z900")
    with pytest.raises(UnknownGpuError):
        resolve_gpu("Z900")
