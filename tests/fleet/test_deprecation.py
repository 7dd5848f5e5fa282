"""fleet.deprecation: an old module attribute returns what its new name holds now and warns,
naming the replacement; a name that was never there is still an AttributeError."""

from __future__ import annotations

import sys
import types

import pytest

from fleet.deprecation import renamed_attributes


@pytest.fixture
def module():
    mod = types.ModuleType("toy_renamed")
    mod.New = 1
    mod.__getattr__ = renamed_attributes("toy_renamed", {
        "Old": "New", "VIEW": ("toy_renamed.view()", lambda: mod.New * 10)})
    sys.modules["toy_renamed"] = mod
    yield mod
    del sys.modules["toy_renamed"]


def test_old_names_read_the_new_ones_live_and_warn(module):
    module.New = 2
    with pytest.deprecated_call(match=r"toy_renamed\.Old is deprecated.*use toy_renamed\.New"):
        assert module.Old == 2
    with pytest.deprecated_call(match=r"use toy_renamed\.view\(\)"):
        assert module.VIEW == 20


def test_unknown_names_stay_attribute_errors(module):
    with pytest.raises(AttributeError, match="no attribute 'Missing'"):
        _ = module.Missing
    assert not hasattr(module, "Other")
