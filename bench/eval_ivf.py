#!/usr/bin/env python
"""``bench/eval.py`` with every vector index forced onto the int8 path with an inverted file.

    .venv/bin/python bench/eval_ivf.py all --out-dir DIR
    MENTIS_IVF_SHARE_ONLY=1 .venv/bin/python bench/eval_ivf.py seamonkey --out FILE

The dev sets hold at most 1,451 documents, far below ``QUANTIZE_MIN_ROWS`` and ``IVF_MIN_ROWS``,
so the shipped thresholds never reach the inverted file there. This sets both to 0 before the
evaluation opens its stores (the lists and probes then follow the shipped rules for the store's
size: ``mentis.retrieval.ivf``), so its rankings can be compared with the shipped run's
(``bench/results/eval-*.json``) method by method, query by query. Arguments are ``eval.py``'s.

With the shipped rule a search scans at least ``MIN_SCAN_PER_RESULT`` rows per result asked for,
so on stores this small it scans (nearly) every row. ``MENTIS_IVF_SHARE_ONLY=1`` drops that floor
to show what probing only ``PROBE_SHARE`` of the lists does to these rankings (a degenerate case:
~10 lists of ~100 rows, and 200 candidates asked of the ~70-140 rows probed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval as evaluation
from mentis.retrieval import ivf, vectors

if __name__ == "__main__":
    vectors.QUANTIZE_MIN_ROWS = 0
    vectors.IVF_MIN_ROWS = 0
    if os.environ.get("MENTIS_IVF_SHARE_ONLY") == "1":
        ivf.MIN_SCAN_PER_RESULT = 0
    sys.exit(evaluation.main())
