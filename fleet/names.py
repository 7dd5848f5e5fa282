"""GPU-name normalisation: the one place that turns a spelling into words.

Rules: lower-case; split on anything but letters, digits and dots; drop marketing words that
do not tell two parts apart (:data:`NOISE_WORDS`) and vendor names; drop dots inside words.
``accelerator_slug`` keeps the vendor in front (a store key part, ``nvidia-v100-sxm2-16gb``);
``lookup_key`` joins the words without it (a catalog index key, ``v100sxm216gb``).
"""

from __future__ import annotations

import re

NOISE_WORDS = frozenset(
    {"nvidia", "tesla", "geforce", "quadro", "corporation", "graphics", "generation"}
)
VENDORS = frozenset({"nvidia", "intel", "habana", "amd", "google"})

# Accelerator names whose vendor the log leaves out.
_VENDOR_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"^(tesla|quadro|geforce|titan|gtx|rtx|a\d{2,3}\b|h\d{2,3}\b|v100|p100|k\d{2}\b|m\d{2}\b"
        r"|l4\b|l40|t4\b|b\d{3}\b|gb\d{3}\b)",
        "nvidia",
    ),
    (r"^(gaudi|hl-)", "habana"),
    (r"^tpu", "google"),
    (r"^(mi\d+|instinct|radeon)", "amd"),
)


def vendor_of(name: str) -> str:
    """The accelerator's vendor (``nvidia``, ``habana``, ``intel``, ``amd``, ``google``) or ''."""
    text = str(name).strip().lower()
    if text.startswith(("nvidia", "tesla", "geforce", "quadro")):
        return "nvidia"
    if text.startswith(("intel", "habana")):
        return "habana" if "gaudi" in text else "intel"
    for prefix in ("amd", "google"):
        if text.startswith(prefix):
            return prefix
    for pattern, vendor in _VENDOR_HINTS:
        if re.search(pattern, text):
            return vendor
    return ""


def gpu_words(name: str) -> list[str]:
    """The words that tell a part apart: ``"Tesla V100-SXM2-16GB"`` -> ``[v100, sxm2, 16gb]``."""
    words = re.split(r"[^a-z0-9.]+", str(name).strip().lower())
    return [
        w.replace(".", "")
        for w in words
        if w and w not in NOISE_WORDS and w not in VENDORS and w.replace(".", "")
    ]


def accelerator_slug(name: str) -> str:
    """Stable key part: ``"Tesla V100-SXM2-16GB"`` -> ``"nvidia-v100-sxm2-16gb"``."""
    if not str(name).strip():
        raise ValueError("empty accelerator name")
    vendor = vendor_of(name)
    body = "-".join(gpu_words(name))
    return f"{vendor}-{body}" if vendor and body else (body or vendor)


def lookup_key(name: str) -> str:
    """Catalog index key: ``"NVIDIA Tesla V100-SXM2"`` -> ``"v100sxm2"``."""
    return "".join(gpu_words(name))
