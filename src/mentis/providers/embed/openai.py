"""OpenAI-compatible embeddings (opt-in, DESIGN §8): ``POST {base_url}/embeddings``.

The OpenRouter preset is ``voyageai/voyage-4`` at 1024 dimensions. Each text passes the secret
scrubber before it is sent. The reply must hold exactly one vector per text (matched by
``index``) of exactly ``dim`` finite numbers, or :class:`~mentis.errors.EmbeddingError` is raised
and nothing is returned; rows are L2-normalised like every :class:`~mentis.providers.embed.Embedder`'s.

``model_id`` is ``openai:<model>`` (``openai:voyageai/voyage-4``): the store records it, so
switching to another provider's model asks for ``mentis reindex``.

Settings for :meth:`OpenAIEmbedder.from_env` (``MENTIS_EMBEDDER=openai``; read once by
:mod:`mentis.config` and passed in):

- ``MENTIS_EMBED_BASE_URL`` (default ``https://openrouter.ai/api/v1``)
- ``MENTIS_EMBED_MODEL`` (default ``voyageai/voyage-4``)
- ``MENTIS_EMBED_DIM`` (default 1024; must be what the model returns)
- ``MENTIS_EMBED_API_KEY``, else ``OPENROUTER_API_KEY`` (optional for a loopback URL)
- ``MENTIS_EMBED_TIMEOUT`` seconds (default 30), ``MENTIS_EMBED_BATCH`` texts per request (default 64)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mentis.errors import EmbeddingError
from mentis.providers.embed import check_vectors
from mentis.providers.http import OPENROUTER_BASE_URL, OpenAIClient, env_api_key, env_float, env_int
from mentis.providers.scrub import scrub_text

DEFAULT_MODEL = "voyageai/voyage-4"
DEFAULT_DIM = 1024
MAX_CHARS = 24_000
"""Characters of one text sent (voyage-4 reads 32k tokens, OpenAI's text-embedding-3 8k)."""
_ENV_HINT = "check MENTIS_EMBED_BASE_URL, MENTIS_EMBED_MODEL, MENTIS_EMBED_DIM and the API key"


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint. Close it when done."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None,
        timeout: float = 30.0,
        batch: int = 64,
        *,
        retries: int = 2,
        backoff: float = 0.5,
        max_wait: float = 4.0,
        sleep: Callable[[float], None] = time.sleep,
        max_chars: int = MAX_CHARS,
    ) -> None:
        if dim <= 0 or batch <= 0:
            raise EmbeddingError(f"dim ({dim}) and batch ({batch}) must be positive")
        self.model = model
        self.model_id = f"openai:{model}"
        self.dim = dim
        self.batch = batch
        self.max_chars = max_chars
        self._http = OpenAIClient(
            base_url,
            api_key,
            timeout=timeout,
            fail=self._error,
            retries=retries,
            backoff=backoff,
            max_wait=max_wait,
            sleep=sleep,
        )
        self.base_url = self._http.base_url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OpenAIEmbedder:
        """Build the embedder from ``MENTIS_EMBED_*`` settings (see the module docstring)."""
        base_url = env.get("MENTIS_EMBED_BASE_URL", "").strip() or OPENROUTER_BASE_URL
        return cls(
            base_url=base_url,
            model=env.get("MENTIS_EMBED_MODEL", "").strip() or DEFAULT_MODEL,
            dim=env_int(env, "MENTIS_EMBED_DIM", DEFAULT_DIM),
            api_key=env_api_key(env, ("MENTIS_EMBED_API_KEY", "OPENROUTER_API_KEY"), base_url),
            timeout=env_float(env, "MENTIS_EMBED_TIMEOUT", 30.0),
            batch=env_int(env, "MENTIS_EMBED_BATCH", 64),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, reason: str) -> EmbeddingError:
        return EmbeddingError(
            f"embedding provider {self.model!r} at {self._http.base_url} failed: {reason}; "
            f"nothing was written; {_ENV_HINT}"
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``(len(texts), dim)`` float32 unit-norm rows in input order."""
        if isinstance(texts, str):
            raise EmbeddingError("embed() takes a sequence of texts, not a single string")
        texts = list(texts)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise EmbeddingError(f"text {index} is {type(text).__name__}, not str")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch):
            chunk = texts[start : start + self.batch]
            out[start : start + len(chunk)] = self._embed_batch(chunk)
        return out

    def _outgoing(self, text: str) -> str:
        # Providers reject an empty input; a space embeds as "nothing".
        return scrub_text(text[: self.max_chars]) or " "

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": [self._outgoing(t) for t in texts], "encoding_format": "float"}
        reply = self._http.post("embeddings", body)
        parsed = self._vectors(reply, len(texts))
        try:
            vectors = check_vectors(parsed, len(texts), self.dim)
        except EmbeddingError as exc:
            raise self._error(exc.message) from exc
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not (norms > 0).all():
            raise self._error("the reply holds an all-zero vector")
        normalised: np.ndarray = (vectors / norms).astype(np.float32)
        return normalised

    def _vectors(self, reply: Any, count: int) -> np.ndarray:
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list):
            raise self._error(f"the reply has no 'data' list ({self._http.redact(str(reply)[:120])})")
        if len(data) != count:
            raise self._error(f"the reply holds {len(data)} vectors for {count} texts")
        rows: list[Any] = [None] * count
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise self._error(f"data[{position}] is not an object")
            index = item.get("index", position)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise self._error(f"data[{position}] has index {index!r}, expected 0..{count - 1}")
            if rows[index] is not None:
                raise self._error(f"the reply holds index {index} twice")
            embedding = item.get("embedding")
            if not isinstance(embedding, list):
                raise self._error(f"data[{position}] has no 'embedding' list (base64 is not supported)")
            if len(embedding) != self.dim:
                raise self._error(
                    f"the provider returned {len(embedding)} dimensions, expected exactly {self.dim} "
                    "(MENTIS_EMBED_DIM)"
                )
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding):
                raise self._error(f"data[{position}].embedding holds a value that is not a number")
            rows[index] = embedding
        return np.asarray(rows, dtype=np.float64)


__all__ = ["DEFAULT_DIM", "DEFAULT_MODEL", "OpenAIEmbedder"]
