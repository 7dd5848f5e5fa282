"""GPU-name normalisation: the one place that turns a spelling into words.

Rules, in order:

1. lower-case; a brand glued to the model (``QuadroP2000``, ``TeslaV100``) is split off;
2. an architecture followed by ``GPU`` (``Blackwell GPU (B200-SXM-180GB)``) and ``Tensor Core
   GPU`` (``H100 NVL Tensor Core GPU``) are dropped;
   ``Max-Q``, ``MaxQ``, ``with Max-Q Design`` become the word ``maxq``; ``Laptop GPU``,
   ``Laptop`` and ``Mobile`` become ``mobile`` (laptop parts are their own catalog entries);
3. split on anything but letters, digits and dots; drop marketing words that do not tell two
   parts apart (:data:`NOISE_WORDS`), filler words (:data:`FILLER_WORDS`) and vendor names;
   drop dots inside words; a repeated ``maxq``/``mobile`` counts once;
4. a memory size written apart or with ``G`` becomes one word (``80 GB``, ``80-gb``, ``144G``
   -> ``80gb``, ``144gb``); a power rating (``400W``, as system descriptions append it) is
   dropped: it does not name another GPU.

``accelerator_slug`` keeps the vendor in front (``nvidia-v100-sxm2-16gb``): the key part of an
accelerator the GPU catalog does not know (deployment keys take the catalog's canonical slug
where it knows the name, :func:`fleet.identity.canonical_slug`);
``lookup_key`` joins the words without it (a catalog index key, ``v100sxm216gb``) and
``unordered_key`` sorts them (a second catalog key, so ``"A100 80GB PCIe"`` finds
``"A100-PCIE-80GB"``). :func:`split_memory` separates a memory-size word (``16gb``).
"""

from __future__ import annotations

import re

from fleet.errors import DeploymentError

NOISE_WORDS = frozenset(
    {"nvidia", "tesla", "geforce", "quadro", "corporation", "graphics", "generation"}
)
FILLER_WORDS = frozenset({"with", "design", "gpu"})
VENDORS = frozenset({"nvidia", "intel", "habana", "amd", "google"})
_SINGLE = frozenset({"maxq", "mobile"})

# Brand words glued to a model number: "quadrop2000" -> "quadro p2000".
_GLUED_BRAND = re.compile(r"\b(nvidia|tesla|quadro|geforce)(?=[a-z]{0,4}\d)")
# "NVIDIA Blackwell GPU (B200-SXM-180GB)" (MLPerf v5.0 descriptions): an architecture
# followed by "GPU" names no part; "RTX PRO 6000 Blackwell" keeps its word
_ARCH_GPU = re.compile(r"\b(?:blackwell|hopper|ampere|volta|turing|ada lovelace)\s+gpu\b"
                       r"|\btensor\s+core\s+gpu\b")  # "H100 NVL Tensor Core GPU"
_MAXQ = re.compile(r"\b(?:with\s+)?max[\s_-]*q(?:\s+design)?\b")
_MOBILE = re.compile(r"\b(?:laptop(?:\s+gpu)?|mobile)\b")
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)gb")
_SIZE_G = re.compile(r"\d+(?:\.\d+)?g")  # "144g" (nvidia-smi: "GH200 144G HBM3e")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_POWER = re.compile(r"\d+w")

# Accelerator names whose vendor the log leaves out.
_VENDOR_HINTS: tuple[tuple[str, str], ...] = (
    (
        # brands, then model numbers: A2..A800, B100..B300, H20..H800, K80, L4..L40S, M40,
        # P4..P6000, T4..T1000, V100(S); GB/GH/GP/GV superchips and dies; Jetson, DGX, HGX
        r"^(tesla|quadro|geforce|titan|gtx|gt\b|rtx|nvs\b|jetson|dgx|hgx|v100s?\b"
        r"|g[bhpv]\d{3}\b|a\d{1,4}g?\b|b\d{3}\b|h\d{2,3}\b|k\d{2}[cmx]?\b|l\d{1,2}s?\b"
        r"|m\d{2}\b|p\d{1,4}\b|t\d{1,4}\b)",
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
    """The words that tell a part apart: ``"Tesla V100-SXM2-16GB"`` -> ``[v100, sxm2, 16gb]``.

    ``"GeForce RTX 2080 Super with Max-Q Design"`` -> ``[rtx, 2080, super, maxq]``;
    ``"NVIDIA GeForce RTX 3080 Laptop GPU"`` -> ``[rtx, 3080, mobile]``.
    """
    text = str(name).strip().lower()
    text = _ARCH_GPU.sub(" ", _GLUED_BRAND.sub(r"\1 ", text))
    text = _MAXQ.sub(" maxq ", text)
    text = _MOBILE.sub(" mobile ", text)
    words: list[str] = []
    for raw in re.split(r"[^a-z0-9.]+", text):
        if raw in ("gb", "g") and words and _NUMBER.fullmatch(words[-1]):
            words[-1] += "gb"  # "80 GB" -> "80gb"
            continue
        if _SIZE_G.fullmatch(raw):
            raw += "b"
        word = raw.replace(".", "")
        if not word or raw in NOISE_WORDS or raw in VENDORS or raw in FILLER_WORDS:
            continue
        if _POWER.fullmatch(word) or (word in _SINGLE and word in words):
            continue
        words.append(word)
    return words


_NOTE = re.compile(r"\s*\(([^)]*)\)\s*$")


def without_note(name: str) -> str:
    """A GPU name without its trailing parenthesised note (``"NVIDIA A100-SXM4-40GB
    (400W)"``, ``"H100 NVL Tensor Core GPU (PCIe)"``); where the name outside the note names
    no part, the note is the part: ``"NVIDIA Blackwell GPU (B200-SXM-180GB)"`` ->
    ``"NVIDIA Blackwell GPU B200-SXM-180GB"`` (as MLPerf v5.0 descriptions write it)."""
    m = _NOTE.search(name)
    if not m:
        return name.strip()
    outside = name[:m.start()].strip()
    if not gpu_words(outside) and gpu_words(m.group(1)):
        return f"{outside} {m.group(1).strip()}".strip()
    return outside


def accelerator_slug(name: str) -> str:
    """Stable key part: ``"Tesla V100-SXM2-16GB"`` -> ``"nvidia-v100-sxm2-16gb"``."""
    if not str(name).strip():
        raise DeploymentError("empty accelerator name")
    vendor = vendor_of(name)
    body = "-".join(gpu_words(name))
    return f"{vendor}-{body}" if vendor and body else (body or vendor)


def lookup_key(name: str) -> str:
    """Catalog index key: ``"NVIDIA Tesla V100-SXM2"`` -> ``"v100sxm2"``."""
    return "".join(gpu_words(name))


def unordered_key(name: str) -> str:
    """Word-order-free catalog key: ``"A100 80GB PCIe"`` and ``"A100-PCIE-80GB"`` agree."""
    return " ".join(sorted(set(gpu_words(name))))


def split_memory(words: list[str]) -> tuple[list[str], float | None]:
    """Words without a memory-size word, and that size in GB (None when absent or ambiguous).

    ``[v100, sxm2, 16gb]`` -> ``([v100, sxm2], 16.0)``.
    """
    rest = [w for w in words if not _MEMORY.fullmatch(w)]
    sizes = {float(m.group(1)) for w in words if (m := _MEMORY.fullmatch(w))}
    return rest, (sizes.pop() if len(sizes) == 1 else None)
