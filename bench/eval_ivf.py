#!/usr/bin/env python
"""``bench/eval.py`` with every vector index forced onto the int8 path with an inverted file.

    .venv/bin/python bench/eval_ivf.py all --out-dir DIR

The dev sets hold at most 1,451 documents, far below ``QUANTIZE_MIN_ROWS`` and ``IVF_MIN_ROWS``,
so the shipped thresholds never reach the inverted file there. This sets both to 0 before the
evaluation opens its stores (the lists and probes then follow the shipped rules for the store's
size: ``mentis.retrieval.ivf``), so its rankings can be compared with the shipped run's
(``bench/results/eval-*.json``) method by method, query by query. Arguments are ``eval.py``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval as evaluation
from mentis.retrieval import vectors

if __name__ == "__main__":
    vectors.QUANTIZE_MIN_ROWS = 0
    vectors.IVF_MIN_ROWS = 0
    sys.exit(evaluation.main())
