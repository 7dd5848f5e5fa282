"""docs/deprecations.md is kept true: every old spelling its tables list still works and says
what replaced it.

* Flags: the command has the old flag as a hidden option and the new one as a shown option.
* Python names: the new name resolves; the old one resolves too and warns (a module when it is
  imported afresh, a module attribute when it is read), except a property of a class, which
  must exist beside the new attribute (it warns on an instance, tested where it is defined).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "deprecations.md"


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading``, each cell without its backticks."""
    text = DOC.read_text(encoding="utf-8").split(f"## {heading}", 1)[1]
    rows = []
    for line in text.splitlines()[1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith(("| old", "| command", "|---")):
            rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
    return rows


FLAGS = _table("Command-line flags")
NAMES = _table("Python names")


def test_the_doc_lists_what_issue_26_renamed():
    assert len(FLAGS) >= 4 and len(NAMES) >= 15


def _resolve(path: str) -> Any:
    """The module or attribute a dotted path names (``a.b.C.attr``)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        parent, _, name = path.rpartition(".")
        return getattr(_resolve(parent), name)


def _owner(path: str) -> Any:
    return _resolve(path.rpartition(".")[0])


@pytest.mark.parametrize(("command", "old", "new"), FLAGS, ids=[f"{c} {o}" for c, o, _ in FLAGS])
def test_old_flags_are_hidden_and_the_new_ones_shown(command, old, new):
    import typer

    from jobcast.cli.app import app

    group = typer.main.get_command(app)
    params = group.commands[command].params
    hidden = {o for p in params if getattr(p, "hidden", False)
              for o in (*p.opts, *p.secondary_opts)}
    shown = {o for p in params if not getattr(p, "hidden", False)
             for o in (*p.opts, *p.secondary_opts)}
    assert old in hidden and old not in shown
    assert new in shown


@pytest.mark.parametrize(("old", "new"), NAMES, ids=[o for o, _ in NAMES])
def test_old_python_names_still_work_and_warn(old, new):
    owner = _owner(old)
    if inspect.isclass(owner):  # a renamed attribute of a class: a property beside the new one
        assert isinstance(inspect.getattr_static(owner, old.rpartition(".")[2]), property)
        assert _has_attribute(_owner(new), new.rpartition(".")[2])
        return
    assert _resolve(new) is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if _is_module(old):
            sys.modules.pop(old, None)
            found = importlib.import_module(old)
        else:
            found = getattr(owner, old.rpartition(".")[2])
    assert found is not None
    said = [str(w.message) for w in caught
            if issubclass(w.category, (DeprecationWarning, FutureWarning))]
    assert said, f"{old} gave no deprecation warning"
    last = new.rpartition(".")[2]
    assert any(re.search(re.escape(last), text) for text in said), said


def _has_attribute(cls: type, name: str) -> bool:
    """A class attribute, or a field its instances get (dataclass, NamedTuple, annotation)."""
    fields = {*getattr(cls, "__dataclass_fields__", {}), *getattr(cls, "_fields", ())}
    return name in fields or hasattr(cls, name) or name in getattr(cls, "__annotations__", {})


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:
        return False


MOVED = _table("Moved or removed in issue 38 (the old spelling is gone)")


@pytest.mark.parametrize(("old", "new"), MOVED or [("", "")], ids=[o for o, _ in MOVED] or ["none"])
def test_moved_names_resolve_only_at_their_new_home(old, new):
    if not old:
        pytest.skip("no name moved yet")
    if new != "(removed)":
        assert _resolve(new) is not None
    with pytest.raises((ImportError, AttributeError)):
        _resolve(old)
