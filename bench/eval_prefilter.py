#!/usr/bin/env python
"""``bench/eval.py`` with every vector index forced onto the int8 path with the sign-bit prefilter.

    .venv/bin/python bench/eval_prefilter.py all --out-dir DIR
    MENTIS_KEEP_PER_RESULT=4 .venv/bin/python bench/eval_prefilter.py seamonkey --out FILE

The dev sets hold at most 1,451 documents, far below ``QUANTIZE_MIN_ROWS`` and
``PREFILTER_MIN_ROWS``, so the shipped thresholds never reach the prefilter there. This sets both
to 0 before the evaluation opens its stores, so its rankings can be compared with the shipped
run's (``bench/results/eval-*.json``) method by method, query by query. Arguments are ``eval.py``'s.

With the shipped rule the prefilter keeps at least 64 rows per result asked for, and search asks
the vector side for 200, so on stores this small every row is kept (the run checks the plumbing,
not the filter). ``MENTIS_KEEP_PER_RESULT=N`` lowers that floor (and drops the 1% share) to make
the filter bite even here (``bench/prefilter_recall.py`` measures it on more real vectors).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval as evaluation
from mentis.index import signbits, vectors

if __name__ == "__main__":
    vectors.QUANTIZE_MIN_ROWS = 0
    vectors.PREFILTER_MIN_ROWS = 0
    if "MENTIS_KEEP_PER_RESULT" in os.environ:
        signbits.KEEP_SHARE = 0.0
        signbits.KEEP_PER_RESULT = int(os.environ["MENTIS_KEEP_PER_RESULT"])
    sys.exit(evaluation.main())
