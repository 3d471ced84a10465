"""Embedding providers.

Every provider implements :class:`Embedder`. ``embed`` takes a batch and returns an
``(n, dim)`` float32 array of L2-normalised rows. Callers never trust the shape: the
service checks it with :func:`check_vectors` before anything is written.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from mentis.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    from mentis.config import Settings


@runtime_checkable
class Embedder(Protocol):
    """A text embedder. Load once per process; ``embed`` batches."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def check_vectors(vectors: object, count: int, dim: int) -> np.ndarray:
    """Return ``vectors`` as float32 if it is exactly ``(count, dim)`` of finite numbers."""
    if not isinstance(vectors, np.ndarray):
        raise EmbeddingError(f"embedder returned {type(vectors).__name__}, not an array")
    if vectors.shape != (count, dim):
        raise EmbeddingError(
            f"embedder returned shape {vectors.shape}, expected ({count}, {dim}); nothing was written"
        )
    if not np.issubdtype(vectors.dtype, np.number):
        raise EmbeddingError(f"embedder returned dtype {vectors.dtype}, not numbers")
    out = vectors.astype(np.float32, copy=False)
    if not np.isfinite(out).all():
        raise EmbeddingError("embedder returned non-finite numbers (NaN or inf); nothing was written")
    return out


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic bag-of-words embedder for unit tests: no model, same text same vector.

    Words are lower-cased and hashed into ``dim`` buckets with a sign, so texts sharing words
    are close. It has no notion of meaning; end-to-end tests use the real model.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.model_id = f"mentis-hash-{dim}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                out[row, bucket] += 1.0 if digest[4] & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out


def load_embedder(settings: Settings) -> Embedder:
    """The embedder ``settings.embedder`` names: ``local``, ``openai`` (``MENTIS_EMBED_*``) or ``hash``."""
    provider = settings.embedder
    if provider == "local":
        from mentis.providers.embed.local import LocalEmbedder

        return LocalEmbedder.load()
    if provider == "openai":
        from mentis.providers.embed.openai import OpenAIEmbedder

        return OpenAIEmbedder.from_env(settings.providers)
    if provider == "hash":
        return HashEmbedder()
    raise ConfigError(f"unknown embedding provider {provider!r}; use 'local' (default), 'openai' or 'hash'")


__all__ = ["Embedder", "HashEmbedder", "check_vectors", "load_embedder"]
