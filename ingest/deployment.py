"""Stable deployment keys: ``nvidia-a100-sxm4-80gb-x8``, ``nvidia-a100-sxm-40gb-x4-n4``."""

from __future__ import annotations

import re

# Accelerator names whose vendor the log leaves out.
_VENDOR_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"^(tesla|quadro|geforce|titan|gtx|rtx|a\d{2,3}\b|h\d{2,3}\b|v100|p100|k\d{2}\b|m\d{2}\b|l4\b|l40|t4\b|b\d{3}\b|gb\d{3}\b)",
        "nvidia",
    ),
    (r"^(gaudi|hl-)", "habana"),
    (r"^tpu", "google"),
    (r"^(mi\d+|instinct|radeon)", "amd"),
)
_DROP_WORDS = {"tesla", "nvidia", "geforce", "corporation", "graphics"}


def accelerator_slug(name: str) -> str:
    """Normalise an accelerator name: ``"Tesla V100-SXM2-16GB"`` -> ``"nvidia-v100-sxm2-16gb"``."""
    text = name.strip().lower()
    if not text:
        raise ValueError("empty accelerator name")
    vendor = ""
    if text.startswith("nvidia") or text.startswith("tesla") or text.startswith("geforce"):
        vendor = "nvidia"
    elif text.startswith("intel") or text.startswith("habana"):
        vendor = "habana" if "gaudi" in text else "intel"
    elif text.startswith("amd"):
        vendor = "amd"
    elif text.startswith("google"):
        vendor = "google"
    else:
        for pattern, hint in _VENDOR_HINTS:
            if re.search(pattern, text):
                vendor = hint
                break
    words = re.split(r"[^a-z0-9.]+", text)
    words = [
        w
        for w in words
        if w and w not in _DROP_WORDS and w not in {vendor, "intel", "habana", "amd", "google"}
    ]
    body = "-".join(words).replace(".", "")
    return f"{vendor}-{body}" if vendor and body else (body or vendor)


def deployment_key(accelerator: str, per_node: int = 1, nodes: int = 1) -> str:
    """``accelerator_slug-x<per node>`` and ``-n<nodes>`` when more than one node."""
    if per_node < 1 or nodes < 1:
        raise ValueError(f"accelerators per node and nodes must be >= 1, got {per_node}, {nodes}")
    key = f"{accelerator_slug(accelerator)}-x{per_node}"
    return key if nodes == 1 else f"{key}-n{nodes}"


def normalise_deployment(text: str) -> str:
    """Accept a key or a free form (``"8x A100-SXM4-80GB"``, ``"V100"``) and return a key."""
    text = text.strip()
    m = re.fullmatch(r"([a-z0-9-]+)-x(\d+)(?:-n(\d+))?", text)
    if m:
        return text
    m = re.fullmatch(r"(\d+)\s*[x×]\s*(.+)", text, flags=re.I)
    if m:
        return deployment_key(m.group(2), int(m.group(1)))
    return deployment_key(text)
