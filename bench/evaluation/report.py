"""The tables ``bench/eval.py`` prints, and the JSON files it writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.locomo import LOCOMO_KS
from evaluation.metrics import ci_text
from mentis.retrieval import graph


def print_table(title: str, rows: Sequence[dict[str, Any]], versus: str | None = None) -> None:
    print(f"\n{title}")
    name_w = max(len(r["method"]) for r in rows) + 2
    head = f"{'method':<{name_w}}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR':>7}{'p50 ms':>9}{'p95 ms':>9}"
    if versus:
        head += f"   {'top5 +/-':>9}  {'dR@10 [95% CI]':<24}{'dMRR [95% CI]':<24}"
    print(head)
    for r in rows:
        p50 = f"{r['p50_ms']:9.1f}" if "p50_ms" in r else f"{'':9}"
        p95 = f"{r['p95_ms']:9.1f}" if "p95_ms" in r else f"{'':9}"
        line = (
            f"{r['method']:<{name_w}}{r['R@1']:7.3f}{r['R@5']:7.3f}{r['R@10']:7.3f}{r['MRR']:7.3f}{p50}{p95}"
        )
        if versus and versus in r:
            v = r[versus]
            line += f"   {'+' + str(v['top5_gained']) + '/-' + str(v['top5_lost']):>9}  "
            line += f"{ci_text(v['r10_delta'], v['r10_delta_ci95']):<24}"
            line += f"{ci_text(v['mrr_delta'], v['mrr_delta_ci95']):<24}"
        print(line)


def print_locomo_table(title: str, rows: Sequence[dict[str, Any]], versus: str | None = None) -> None:
    print(f"\n{title}")
    name_w = max(len(r["method"]) for r in rows) + 2
    cols = [f"R@{k}" for k in LOCOMO_KS] + ["MRR"]
    head = f"{'':<{name_w}}{'strict':^28}  {'lenient':^28}"
    print(head)
    head = f"{'method':<{name_w}}" + "".join(f"{c:>7}" for c in cols) + "  "
    head += "".join(f"{c:>7}" for c in cols) + f"{'p50 ms':>9}{'p95 ms':>9}"
    if versus:
        head += f"   {'dR@10 strict [95% CI]':<26}{'dR@10 lenient [95% CI]':<26}{'dMRR strict [95% CI]':<24}"
    print(head)
    for r in rows:
        line = f"{r['method']:<{name_w}}" + "".join(f"{r['strict'][c]:7.3f}" for c in cols) + "  "
        line += "".join(f"{r['lenient'][c]:7.3f}" for c in cols)
        line += f"{r['p50_ms']:9.1f}{r['p95_ms']:9.1f}" if "p50_ms" in r else f"{'':18}"
        if versus and versus in r:
            v, le = r[versus]["strict"], r[versus]["lenient"]
            line += f"   {ci_text(v['r10_delta'], v['r10_delta_ci95']):<26}"
            line += f"{ci_text(le['r10_delta'], le['r10_delta_ci95']):<26}"
            line += f"{ci_text(v['mrr_delta'], v['mrr_delta_ci95']):<24}"
        print(line)


def print_locomo_categories(rows: Sequence[dict[str, Any]]) -> None:
    cats = list(rows[0]["per_category"])
    name_w = max(len(r["method"]) for r in rows) + 2
    print("\nper category, R@10 strict / lenient")
    print(
        f"{'method':<{name_w}}"
        + "".join(f"{c + ' (' + str(rows[0]['per_category'][c]['n']) + ')':>22}" for c in cats)
    )
    for r in rows:
        cells = [
            f"{r['per_category'][c]['strict']['R@10']:.3f} / {r['per_category'][c]['lenient']['R@10']:.3f}"
            for c in cats
        ]
        print(f"{r['method']:<{name_w}}" + "".join(f"{c:>22}" for c in cells))


def print_variants(out: dict[str, Any]) -> None:
    """The lab's rows (``--variants``), when the run has them."""
    if "variants" in out:
        print_table(
            "lab: issue 16's mechanisms (bench only; latency excludes the query embedding; "
            "+/- and differences vs the shipped row, 95% bootstrap intervals)",
            out["variants"],
            "vs_shipped",
        )


def report_seamonkey(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(
        f"SeaMonkey duplicates: {c['reports']} reports, {c['pairs_used']} pairs "
        f"({c['query_reports']} query reports; {c['pairs_skipped_unknown_id']} listed pairs skipped: "
        f"id not in the reports); fill {out['fill']['total_s']} s; run {out['runtime_s']} s"
    )
    print_table(f"methods, all {c['pairs_used']} pairs (same data, same queries)", out["results"], "vs_bm25s")
    print_table(
        f"same rankings, the {c['pairs_single_id_rows']} pairs of single-id rows "
        "(the issue's BM25 reference set)",
        out["results_single_id_rows"],
        "vs_bm25s",
    )
    g = out["graph_check"]
    print(
        f"\ngraph: {g['edges_from_top_seeds_all_queries']} edges from the top {graph.SEEDS} seeds over "
        f"{g['queries']} queries; rankings changed by the graph in "
        f"{g['queries_where_graph_changes_ranking']} queries -> "
        f"fused+graph {'==' if g['graph_equals_fused'] else '!='} fused"
    )
    print_variants(out)


def report_pyfaq(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(
        f"\nPython FAQ: {c['questions']} questions from {c['files']} FAQ pages, each answer stored as a "
        f"thought (question not stored); fill {out['fill']['total_s']} s; run {out['runtime_s']} s"
    )
    print_table(
        f"methods, all {c['questions']} questions (same answers, same questions)", out["results"], "vs_bm25s"
    )
    g = out["graph_check"]
    print(
        f"\ngraph: {g['edges_from_top_seeds_all_queries']} edges from the top {graph.SEEDS} seeds; "
        f"search_thoughts differs from fused in {g['queries_where_search_differs_from_fused']} queries"
    )
    print_variants(out)


def report_locomo(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(
        f"\nLoCoMo dev: {c['conversations']} conversations, {c['turns']} turns stored as thoughts in one "
        f"repository, {c['questions_used']} questions ({c['questions_dropped_no_known_evidence']} dropped: "
        f"no known evidence); fill {out['fill']['total_s']} s; run {out['runtime_s']} s"
    )
    print_locomo_table(
        f"methods, all {c['questions_used']} questions (same turns, same questions; dMRR vs bm25s)",
        out["results"],
        "vs_bm25s",
    )
    print_locomo_categories(out["results"])
    g = out["graph_check"]
    print(
        f"\ngraph: {g['edges_from_top_seeds_all_questions']} edges from the top {graph.SEEDS} seeds over "
        f"{g['questions']} questions (no refs, relations, tags or concepts stored); search_thoughts "
        f"differs from the fused ablation in {g['questions_where_search_differs_from_fused']} -> "
        f"search_thoughts {'==' if out['search_equals_fused'] else '!='} fused"
    )
    print(
        "references, OTHER systems on the FULL 10-conversation LoCoMo (different, larger set; not run here):"
    )
    for ref in out["references_other_systems"]:
        print(f"  {ref['system']:<10} lenient R@10 {ref['R@10']:.3f}")
    if "variants" in out:
        print_locomo_table(
            "lab: issue 16's mechanisms (bench only; latency excludes the query embedding; "
            "differences vs the shipped row, 95% bootstrap intervals)",
            out["variants"],
            "vs_shipped",
        )


def write(out: dict[str, Any], path: Path, variants_path: Path | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    main_part = {k: v for k, v in out.items() if k != "variants"}
    path.write_text(json.dumps(main_part, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    if variants_path is not None and "variants" in out:
        variants_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {variants_path}")
