#!/usr/bin/env python
"""Retrieval evaluation on public data (protocols in ../shared/data/README.md).

    .venv/bin/python bench/eval.py seamonkey [--out bench/results/eval-seamonkey.json] [--variants]
    .venv/bin/python bench/eval.py locomo    [--out bench/results/eval-locomo.json] [--variants]
    .venv/bin/python bench/eval.py pyfaq     [--out bench/results/eval-pyfaq.json] [--variants]
    .venv/bin/python bench/eval.py all       [--out-dir bench/results] [--variants [--sweep]]

``all`` runs the three and writes ``eval-<name>.json`` to ``--out-dir`` (with ``--variants`` also
``eval-<name>-variants.json``: the same results plus the lab's rows).

Every difference printed (a method against bm25s, a lab row against the shipped row) carries a
paired bootstrap 95% interval over the queries (``evaluation/metrics.py``: the per-query
difference resampled 2,000 times with a fixed seed, percentile interval), for R@10 and MRR.
The model's vectors of a corpus are computed once and kept under ``bench/.cache/`` (keyed by
the model id and the texts), so a rerun spends its time on the ranking.

SeaMonkey duplicates: every bug report is stored as a task with one attempt through the real
``Memory.record_attempt`` (real local embedder, one temporary SQLite store). For every listed
duplicate pair (query -> duplicate; the combined csv lists both directions) the query report's
summary + description is searched with the real ``Memory.search`` (limit 50, repository filter),
the query's own task is dropped, and the rank of the duplicate's task is scored: R@1, R@5, R@10,
MRR (0 when absent from the 50). Side by side, on the same data and queries:

- ``bm25s``: plain BM25 (bm25s, Snowball English stemmer from PyStemmer, bm25s' English
  stopwords) over summary + description;
- ``dense``: plain cosine with the same model over the same attempt texts, brute force;
- ablations through the system's own pipeline (``mentis.retrieval.pipeline.candidates``):
  ``lexical`` (no vector side), ``vector`` (no lexical side), ``fused`` (lexical + vector, RRF,
  grouped to tasks, without the graph walk) and ``fused+graph`` (``Memory.search`` as shipped:
  RRF, then the personalised PageRank over task/file/tag links). The SeaMonkey store has one attempt per
  task and no files or tags, so the graph has no edges and ``fused+graph`` must rank exactly as
  ``fused``; the run counts the edges and the queries whose rankings differ.

LoCoMo dev (3 conversations, 1,451 turns, 495 questions): every turn of every conversation is stored
as one thought in ONE repository (``locomo/dev``) through the real ``Memory.append_thought`` with
the real local embedder: type ``FactLearned``, content ``"{speaker}: {text}"``, no tags,
``session_id = "locomo-<conversation>-S<session>"`` (stored in the body, not embedded; the store
indexes each turn with the turn before it in its session as a causal window row, and search_thoughts
reads it to give each candidate turn its search-time window, the turns just before and after it in
its session). The session date is NOT stored, so the system, bm25s and dense see exactly the same
text per turn. ``link_duplicates=False`` on every append, so near-duplicate supersession ("Thanks!"
said twice) cannot hide a turn. Each question is asked with the real ``Memory.search_thoughts``
(repository filter, limit 50 = MAX_SEARCH_LIMIT); the thought ids map back to (conversation,
dia_id). A strict hit is an evidence turn in the top k; a lenient hit is a turn of the same
conversation and session within 2 turns of an evidence turn (dia_id "D<session>:<turn>"). R@5/10/20
and MRR (over the 50 returned; 0 if absent), strict and lenient, overall and per category, beside
``bm25s`` and ``dense`` over the same turn texts and the ``lexical`` / ``vector`` / ``fused`` (RRF
with the session windows and the causal window rows, no graph) ablations. search_thoughts runs the
graph walk too (``graph.rerank`` over refs, relations, tags, concepts); this fill stores none of
them, so it must rank exactly as ``fused`` (checked and counted). An evidence field "D8:6; D9:17" is
split into two ids. Categories are reported with the commonly used names (1 multi-hop, 2 temporal, 3
open-domain, 4 single-hop, 5 adversarial); all five are scored.

Python FAQ (178 questions of the Python documentation's FAQ pages, from Debian's
``python3.11-doc``; fetched into ``bench/.cache/`` with ``apt-get download`` on first use, see
``evaluation/pyfaq.py``): every answer is stored as one thought (the question is not stored);
each question is asked with ``Memory.search_thoughts``; its own answer is the hit. R@1/5/10, MRR.

``--variants`` runs the lab (``evaluation/lab.py``): issue 16's mechanisms as ablations of the
same pipeline on the same store (qtf caps, stopwords by query length, agreement-weighted and
score fusion, RRF k, the session windows; title-to-title signals on SeaMonkey; window and dated
turn signals on LoCoMo), each row against the shipped one with intervals. ``--sweep`` runs the
older parameter sweep instead (term selection, field weights, RRF k, weights, depth, graph).
They change nothing in ``src``. The protocol is fixed; nothing is tuned per query.

Layout: ``evaluation/seamonkey.py``, ``evaluation/locomo.py`` and ``evaluation/pyfaq.py`` load,
store and score one benchmark each; ``evaluation/runner.py`` is the run they share; ``evaluation/lab.py`` the
variants; ``evaluation/metrics.py`` and ``evaluation/report.py`` the scores and the printing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from evaluation.locomo import LoCoMo
from evaluation.pyfaq import PythonFaq
from evaluation.report import report_locomo, report_pyfaq, report_seamonkey, write
from evaluation.runner import ROOT, run
from evaluation.seamonkey import SeaMonkey
from mentis.providers.embed.local import LocalEmbedder

DEFAULT_DATA = Path(os.environ.get("MENTIS_BENCH_DATA", ROOT.parent / "shared" / "data"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=["seamonkey", "locomo", "pyfaq", "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory of the data files")
    parser.add_argument(
        "--out", type=Path, default=None, help="seamonkey/locomo: write the results as JSON here"
    )
    parser.add_argument(
        "--out-dir", type=Path, default=ROOT / "bench" / "results", help="all: write eval-<name>.json here"
    )
    parser.add_argument(
        "--variants", action="store_true", help="also run the lab: issue 16's mechanisms as ablations"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="with --variants: the older parameter sweep instead"
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    embedder = LocalEmbedder.load()
    runs = {
        "seamonkey": (SeaMonkey, report_seamonkey),
        "locomo": (LoCoMo, report_locomo),
        "pyfaq": (PythonFaq, report_pyfaq),
    }
    names = list(runs) if args.benchmark == "all" else [args.benchmark]
    for name in names:
        bench, report = runs[name]
        out = run(bench(args.data), args.variants, embedder, args.sweep)
        report(out)
        if args.benchmark == "all":
            write(out, args.out_dir / f"eval-{name}.json", args.out_dir / f"eval-{name}-variants.json")
        elif args.out:
            if "variants" in out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
                print(f"wrote {args.out}")
            else:
                write(out, args.out)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
