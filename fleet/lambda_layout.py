"""Lambda's tf_cnn_benchmarks folder convention: the one definition of what its names mean.

The layout (LambdaColdStorage/lambda-tensorflow-benchmark)::

    <system>.logs/metadata
    <system>.logs/<config>/<network>-<B>/throughput/<rep>    (a log)
    <system>.logs/<config>/<network>-<B>/thermal/<rep>       (GPU clocks and temperatures)

Rules (pure functions of names; nothing here reads a file):

* **System folder** ``<cpu>-<gpu>[_options].logs``: the system is the name without ``.logs``;
  its words are that name split on ``_`` and ``-``. Option words: ``XLA`` (the runs were
  meant to use XLA), ``NVLink``, ``TF<a>_<b>`` (TensorFlow ``a.b``; the first such pair of
  ``_``-separated words), and others kept as words (``trt``, ``trt2``, ``HP16``,
  ``LambdaCloud``). A word counts only whole: ``XLA`` is not found in ``XLAB``.
* **Config folder** ``<data>-<update>-<precision>-<N>gpus`` then ``-inference`` and/or
  ``-distortions`` in any order, each at most once (anything else: not the layout).
  ``data`` is ``syn`` (synthetic) or ``real``; ``update`` lower-case letters and ``_``;
  ``precision`` one of ``fp16``, ``fp32``, ``bf16``, ``tf32``; ``N`` digits, the GPU count.
  Mode is ``inference`` with the ``-inference`` suffix, else ``training``. Lambda published
  only ``replicated``/``parameter_server``, ``fp16``/``fp32`` and ``N >= 1``
  (:attr:`ConfigFolder.published`).
* **Network folder** ``<network>-<B>``: ``network`` of letters, digits, ``_`` and ``.``
  (as printed, case kept); ``B`` digits, the batch **per GPU**.
* **Log path**: ``.../<system>.logs/<config>/<network>-<B>/throughput/<rep>`` with all three
  names following the rules above; its ``metadata`` is ``<system>.logs/metadata``.
* **Side files** (of the layout, never logs): ``metadata`` directly in a ``*.logs`` folder,
  and any file in a ``thermal`` folder whose parent is a network folder.
* **metadata** text: one ``key<TAB>value`` per line (``CPU``, ``GPU 0``, ``TF``, ...); keys
  and values stripped; lines without a tab or with an empty key ignored; a repeated key
  keeps its last value (at its first position).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePath

SYSTEM_SUFFIX = ".logs"
METADATA = "metadata"
THROUGHPUT = "throughput"
THERMAL = "thermal"
DATA_NAMES = {"syn": "synthetic", "real": "real"}
PUBLISHED_UPDATES = frozenset({"replicated", "parameter_server"})
PUBLISHED_PRECISIONS = frozenset({"fp16", "fp32"})
CONFIG_SUFFIXES = frozenset({"inference", "distortions"})

_CONFIG = re.compile(
    r"^(?P<data>syn|real)-(?P<update>[a-z_]+)-(?P<precision>fp16|fp32|bf16|tf32)"
    r"-(?P<n>\d+)gpus(?P<rest>(?:-[a-z]+)*)$"
)
_NETWORK = re.compile(r"^(?P<network>[A-Za-z0-9_.]+)-(?P<batch>\d+)$")
_NAME_TF = re.compile(r"(?:^|_)TF(\d+)_(\d+)(?:_|$)")
_WORD_SPLIT = re.compile(r"[_-]")


@dataclass(frozen=True)
class SystemFolder:
    """A ``<cpu>-<gpu>[_options].logs`` name: ``name`` without ``.logs`` and its words."""

    name: str
    words: tuple[str, ...]
    tf_version: str | None  # "1.15" from the words TF1_15, as written

    def has(self, option: str) -> bool:
        """Whether ``option`` is one of the name's words (whole words only)."""
        return option in self.words

    @property
    def xla(self) -> bool:
        """The name carries the option ``XLA``."""
        return self.has("XLA")

    @property
    def nvlink(self) -> bool:
        """The name carries the option ``NVLink``."""
        return self.has("NVLink")


@dataclass(frozen=True)
class ConfigFolder:
    """A ``<data>-<update>-<precision>-<N>gpus[-inference][-distortions]`` name."""

    data: str  # "syn" or "real", as in the name
    update: str
    precision: str
    gpus: int
    inference: bool
    distortions: bool

    @property
    def mode(self) -> str:
        """``inference`` or ``training``."""
        return "inference" if self.inference else "training"

    @property
    def dataset(self) -> str:
        """``synthetic`` or ``real``."""
        return DATA_NAMES[self.data]

    @property
    def published(self) -> bool:
        """Within what Lambda published: a known update and precision, at least one GPU."""
        return (self.update in PUBLISHED_UPDATES and self.precision in PUBLISHED_PRECISIONS
                and self.gpus > 0)


@dataclass(frozen=True)
class NetworkFolder:
    """A ``<network>-<B>`` name: the network as written and the batch per GPU."""

    network: str
    batch: int


@dataclass(frozen=True)
class LogPath:
    """The facts of a log path in the layout; ``folder`` is its last four folders joined by
    the path separator, ``metadata`` the path of its system's ``metadata``."""

    system: SystemFolder
    config: ConfigFolder
    network: NetworkFolder
    rep: str
    folder: str
    metadata: str


def parse_system(name: str) -> SystemFolder:
    """The system folder's name (with or without ``.logs``) as system and option words."""
    system = name.removesuffix(SYSTEM_SUFFIX)
    tf = _NAME_TF.search(system)
    return SystemFolder(name=system, words=tuple(_WORD_SPLIT.split(system)),
                        tf_version=f"{tf[1]}.{tf[2]}" if tf else None)


def is_system_folder(name: str) -> bool:
    """A folder name of the form ``<...>.logs``."""
    return name.endswith(SYSTEM_SUFFIX)


def parse_config(name: str) -> ConfigFolder | None:
    """The config folder's facts; None when the name does not follow the rules."""
    m = _CONFIG.match(name)
    if m is None:
        return None
    suffixes = [s for s in m["rest"].split("-") if s]
    if any(s not in CONFIG_SUFFIXES for s in suffixes) or len(set(suffixes)) != len(suffixes):
        return None
    return ConfigFolder(data=m["data"], update=m["update"], precision=m["precision"],
                        gpus=int(m["n"]), inference="inference" in suffixes,
                        distortions="distortions" in suffixes)


def parse_network(name: str) -> NetworkFolder | None:
    """``resnet50-64`` -> network ``resnet50``, batch per GPU 64; None off the rules."""
    m = _NETWORK.match(name)
    return NetworkFolder(m["network"], int(m["batch"])) if m else None


def parse_log_path(path: str | PurePath) -> LogPath | None:
    """The facts of ``.../<system>.logs/<config>/<network>-<B>/throughput/<rep>``; None for
    any other path (split on the OS path separator)."""
    parts = str(path).split(os.sep)
    if len(parts) < 5 or parts[-2] != THROUGHPUT or not is_system_folder(parts[-5]):
        return None
    config, network = parse_config(parts[-4]), parse_network(parts[-3])
    if config is None or network is None:
        return None
    return LogPath(system=parse_system(parts[-5]), config=config, network=network,
                   rep=parts[-1], folder=os.sep.join(parts[-5:-1]),
                   metadata=os.sep.join([*parts[:-4], METADATA]))


def is_side_file(path: str | PurePath) -> bool:
    """``<system>.logs/metadata`` or ``<network>-<B>/thermal/<rep>``: files of the layout
    that are not logs."""
    path = PurePath(path)
    parent = path.parent
    if path.name == METADATA and is_system_folder(parent.name):
        return True
    return parent.name == THERMAL and _NETWORK.match(parent.parent.name) is not None


def parse_metadata(text: str) -> dict[str, str]:
    """A ``metadata`` file's text as key -> value (module doc)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out
