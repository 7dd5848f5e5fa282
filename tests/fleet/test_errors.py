"""One error family (issue 26): every exception class the library defines is a
:class:`fleet.errors.JobcastError` (through its room's base) and keeps its built-in base; a
failure has one JSON shape; anything else is reported as a bug.

The classes are found by reading the source (AST), so a new exception class that forgets
its room's base fails here without anyone listing it."""

from __future__ import annotations

import ast
import builtins
import importlib

import pytest

from fleet.errors import ErrorInfo, JobcastError, bug_info, error_info
from tests.paths import REPO

ROOMS = ("fleet", "ingest", "layerwise", "models", "jobcast")
ROOM_BASES = {"FleetError", "IngestError", "LayerwiseError", "ModelError", "ServiceError",
              "MlopsError", "CliError", "JobcastError"}
# private classes that only carry control flow inside one module, never to a caller
CONTROL_FLOW = {"_Partial", "_Refusal", "_Stop", "_Unusable"}
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """name -> (module, base names) of every class defined in the library rooms."""
    found: dict[str, tuple[str, list[str]]] = {}
    for room in ROOMS:
        for path in sorted((REPO / room).rglob("*.py")):
            tree = ast.parse(path.read_text())
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b)
                             for b in node.bases]
                    found[f"{module}.{node.name}"] = (module, bases)
    return found


def _exception_classes() -> dict[str, tuple[str, list[str]]]:
    classes = _classes()
    short = {key.rsplit(".", 1)[1]: value for key, value in classes.items()}

    def is_exception(bases: list[str], seen: frozenset = frozenset()) -> bool:
        for base in bases:
            if base in BUILTIN_EXCEPTIONS or base in ROOM_BASES:
                return True
            if base in short and base not in seen and is_exception(short[base][1],
                                                                   seen | {base}):
                return True
        return False

    return {k: v for k, v in classes.items() if is_exception(v[1])}


EXCEPTIONS = _exception_classes()


def test_the_scan_finds_the_project_errors():
    names = {key.rsplit(".", 1)[1] for key in EXCEPTIONS}
    assert {"ParseError", "UnknownGpuError", "RouteMiss", "JobRequestError",
            "NetworkSpecError", "NoModelError", "ServeError"} <= names
    assert len(EXCEPTIONS) >= 40


@pytest.mark.parametrize("key", sorted(k for k in EXCEPTIONS
                                         if k.rsplit(".", 1)[1] not in CONTROL_FLOW))
def test_every_library_error_is_a_jobcast_error(key):
    module, _ = EXCEPTIONS[key]
    name = key.rsplit(".", 1)[1]
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, JobcastError), f"{key}: derive it from its room's base error"
    assert cls.kind and cls.kind.replace("_", "").isalpha() and cls.kind.islower()


def test_room_errors_keep_their_builtin_base():
    from fleet.catalog import UnknownGpuError
    from ingest.events import ParseError
    from jobcast.service.engine.routes import RouteMiss

    assert issubclass(ParseError, ValueError) and issubclass(RouteMiss, LookupError)
    assert issubclass(UnknownGpuError, KeyError)


def test_one_json_shape_from_the_error_itself():
    from ingest.events import ParseError
    from jobcast.service.engine.request import JobRequestError

    parse = ParseError("not a number", line=7, source="runs/a.log").info().as_dict()
    assert parse == {"kind": "parse", "message": str(ParseError(
        "not a number", line=7, source="runs/a.log")), "file": "runs/a.log", "line": 7,
        "field": None, "row": None}
    request = error_info(JobRequestError("must be positive", field="batch_size", row=3))
    assert (request.kind, request.field, request.row, request.file) == (
        "request", "batch_size", 3, None)


def test_anything_else_is_reported_as_a_bug():
    info = error_info(ZeroDivisionError("division by zero"))
    assert info == bug_info(ZeroDivisionError("division by zero"))
    assert info.kind == "bug" and "bug in jobcast" in info.message
    assert "ZeroDivisionError: division by zero" in info.message
    assert set(ErrorInfo("x", "y").as_dict()) == {"kind", "message", "file", "line", "field",
                                                 "row"}


@pytest.mark.parametrize("call, cls_name, kind, message", [
    (lambda: __import__("fleet.deployment").deployment.Deployment.parse(""),
     "DeploymentError", "deployment", "empty deployment"),
    (lambda: __import__("fleet.deployment").deployment.Deployment.parse("8x"),
     "DeploymentError", "deployment", "deployment '8x' names no accelerator"),
    (lambda: __import__("fleet.deployment").deployment.Deployment("V100", 0),
     "DeploymentError", "deployment", "accelerators per node and nodes must be >= 1"),
    (lambda: __import__("fleet.deployment").deployment.normalise_deployment("8x V100 IB999"),
     "DeploymentError", "deployment", "unknown network 'IB999'"),
    (lambda: __import__("fleet.names").names.accelerator_slug(" "),
     "DeploymentError", "deployment", "empty accelerator name"),
    (lambda: __import__("fleet.identity").identity.gpu_identity(" "),
     "DeploymentError", "deployment", "empty accelerator name"),
    (lambda: __import__("fleet.precision").precision.parse_precision("fp8"),
     "PrecisionError", "precision", "unknown precision 'fp8'; accepted: "),
    (lambda: __import__("fleet.precision").precision.parse_precision(True),
     "PrecisionError", "precision", "unknown precision True"),
    (lambda: __import__("fleet.precision").precision.parse_precision(16.5),
     "PrecisionError", "precision", "unknown precision 16.5"),
    (lambda: __import__("fleet.framework").framework.parse_framework("jax"),
     "FrameworkError", "framework",
     "unknown framework 'jax'; choose from auto, tensorflow, pytorch"),
    (lambda: __import__("fleet.data_parallel").data_parallel.parse_data_parallel("zero"),
     "DataParallelError", "data_parallel", "unknown data-parallel mechanism 'zero'"),
])
def test_fleet_user_errors_have_their_class_kind_and_old_message(call, cls_name, kind, message):
    """Each bad spelling raises its own FleetError (still a ValueError), message unchanged."""
    from fleet.errors import FleetError

    with pytest.raises(FleetError) as caught:
        call()
    exc = caught.value
    assert type(exc).__name__ == cls_name and isinstance(exc, ValueError)
    assert exc.kind == kind and exc.info().kind == kind
    assert str(exc).startswith(message)


def test_the_new_fleet_errors_can_be_imported_where_they_are_raised():
    from fleet.catalog import CatalogError, CatalogRowError
    from fleet.deployment import DeploymentError
    from fleet.errors import DeploymentError as Same

    assert DeploymentError is Same
    assert issubclass(CatalogRowError, CatalogError) and issubclass(CatalogError, ValueError)


def test_a_bad_catalog_file_names_its_file_and_line(tmp_path):
    from fleet.catalog import CATALOG_PATH, CatalogError, load_catalog

    lines = CATALOG_PATH.read_text().splitlines()
    bad = tmp_path / "gpus.csv"
    bad.write_text("\n".join([lines[0], lines[1].replace(",6,GDDR5,", ",-6,GDDR5,", 1)]) + "\n")
    with pytest.raises(CatalogError) as caught:
        load_catalog(bad)
    info = caught.value.info()
    assert (info.kind, info.file, info.line) == ("catalog", str(bad), 2)
    assert str(caught.value).startswith(f"{bad}:2: ")


def test_ray_errors_say_what_needed_ray_and_where_it_was():
    from fleet.ray_session import RayConnectError, RayMissing

    missing = RayMissing("Ray campaigns")
    assert isinstance(missing, ImportError) and missing.what == "Ray campaigns"
    assert missing.package == "ray" and missing.info().kind == "missing_dependency"
    refused = RayConnectError("10.0.0.1:6379", "timed out")
    assert isinstance(refused, ConnectionError) and refused.address == "10.0.0.1:6379"
    assert str(refused) == "cannot join Ray at 10.0.0.1:6379: timed out"
    assert refused.info().kind == "ray"
