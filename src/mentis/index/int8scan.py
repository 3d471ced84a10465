"""Dot products of int8 rows with a query, on onnxruntime's integer matrix kernels.

numpy has no fast int8 product: converting rows to float32 block by block before a BLAS product
cost about twice the float32 scan it replaces (measured at 100k × 384). onnxruntime (already the
embedding runtime) runs ``MatMulInteger`` with SIMD integer kernels straight on the int8 buffer,
at about the float32 scan's speed with a quarter of the memory read. The query is quantized to
int8 too; the caller re-scores the best candidates exactly, so this only has to rank them.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

_LOCK = threading.Lock()


@functools.cache
def _session(dim: int) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
    from onnx import TensorProto, helper

    rows = helper.make_tensor_value_info("rows", TensorProto.INT8, ["n", dim])
    query = helper.make_tensor_value_info("query", TensorProto.INT8, [dim, 1])
    out = helper.make_tensor_value_info("dots", TensorProto.INT32, ["n", 1])
    node = helper.make_node("MatMulInteger", ["rows", "query"], ["dots"])
    model = helper.make_model(
        helper.make_graph([node], "int8_scan", [rows, query], [out]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def int8_dots(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``rows @ query`` (float32) for int8 ``rows`` (C-contiguous, n × dim) and a float32 query,
    with the query quantized to int8 (scores are approximate; see the module docstring)."""
    peak = float(np.abs(query).max()) if len(query) else 0.0
    scale = peak / 127.0 if peak > 0 else 1.0
    q8 = np.rint(query / scale).astype(np.int8).reshape(-1, 1)
    with _LOCK:
        session = _session(rows.shape[1])
    dots = session.run(None, {"rows": np.ascontiguousarray(rows), "query": q8})[0]
    out: np.ndarray = dots[:, 0].astype(np.float32)
    out *= scale
    return out
