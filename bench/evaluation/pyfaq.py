"""Python FAQ: every answer of the Python documentation's FAQ stored as a thought, each question
asked with search_thoughts; the question's own answer should rank high.

The data is Debian's ``python3.11-doc`` package (the reStructuredText sources of the docs,
``html/_sources/faq/*.rst.txt``; Python Software Foundation License, see the package's
``copyright`` file). It is fetched with the ordinary client (``apt-get download``, no root, no
install) into ``bench/.cache/`` once and unpacked with ``dpkg-deb -x``; an installed package
(``/usr/share/doc/python3.11/html/_sources/faq``) is used as it is.

A question is a section heading underlined with ``-``; its answer is the text up to the next
heading of that or a higher level, with the markup that is not text dropped (roles, link targets,
directives' names, hyperlink URLs). The question itself is not stored: a hit is the answer.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.lab import Variant, faq_variant_grid
from evaluation.metrics import Method, paired
from evaluation.runner import (
    CACHE,
    LIMIT,
    Benchmark,
    environment,
    fill,
    shipped_parameters,
    thought_notes,
)
from mentis import retrieval
from mentis.api.common import MAX_TEXT_BYTES
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput
from mentis.providers.embed.local import LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore

FAQ_REPO = "python/faq"
PACKAGE = "python3.11-doc"
FAQ_PATH = Path("usr/share/doc/python3.11/html/_sources/faq")
_ROLE = re.compile(r":[\w:.-]+:`(?:[^`<]*<)?([^`>]+)>?`")  # :func:`x`, :mod:`text <target>`
_LINK = re.compile(r"`([^`<]+?)\s*<[^`>]+>`_+")  # `text <url>`_
_LITERAL = re.compile(r"``([^`]+)``")


@dataclass(frozen=True)
class Entry:
    eid: str  # "<file>#<n>"
    question: str
    answer: str


def faq_dir() -> tuple[Path, str]:
    """The FAQ sources and where they came from (fetched into the cache once)."""
    installed = Path("/") / FAQ_PATH
    if installed.is_dir():
        return installed, f"installed {PACKAGE}"
    root = CACHE / PACKAGE
    if not (root / FAQ_PATH).is_dir():
        root.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(["apt-get", "download", PACKAGE], cwd=root, capture_output=True, text=True)
        if got.returncode != 0:
            raise SystemExit(
                f"could not fetch Debian's {PACKAGE} for the Python FAQ set ({got.stderr.strip()}); "
                f"run `apt-get update`, or `apt-get install {PACKAGE}`, then try again"
            )
        deb = next(root.glob(f"{PACKAGE}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    debs = sorted(p.name for p in root.glob(f"{PACKAGE}_*.deb"))
    return root / FAQ_PATH, debs[0] if debs else PACKAGE


def plain(text: str) -> str:
    """reStructuredText to the words a reader sees."""
    out = []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith(".. ") and "::" in s:
            rest = s.split("::", 1)[1].strip()  # ".. note:: text" keeps its text
            if rest:
                out.append(rest)
            continue
        if s.startswith(".. _") or s.startswith(".. index") or s == "::":
            continue
        if re.match(r"^:\w+:( |$)", s):
            continue  # field lists of directives (":tocdepth: 2")
        line = _LINK.sub(r"\1", line)
        line = _ROLE.sub(r"\1", line)
        line = _LITERAL.sub(r"\1", line)
        out.append(line.rstrip().removesuffix("::").rstrip() + (":" if line.rstrip().endswith("::") else ""))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def load_faq(src: Path) -> list[Entry]:
    entries: list[Entry] = []
    for path in sorted(src.glob("*.rst.txt")):
        lines = path.read_text(encoding="utf-8").split("\n")
        heads = []  # (line index, underline char)
        for i in range(len(lines) - 1):
            title, under = lines[i].rstrip(), lines[i + 1].rstrip()
            underline = bool(under) and len(set(under)) == 1 and under[0] in "=-" and len(under) >= len(title)
            if title and underline and (len(set(title)) > 1 or title[0] not in "=-"):
                heads.append((i, under[0]))
        for n, (i, char) in enumerate(heads):
            if char != "-":
                continue
            end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
            answer = plain("\n".join(lines[i + 2 : end]))
            if answer:
                entries.append(Entry(f"{path.name.split('.')[0]}#{len(entries)}", lines[i].strip(), answer))
    return entries


def truncate_utf8(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", errors="ignore")


class PythonFaq(Benchmark):
    name, repository, kind = "pyfaq", FAQ_REPO, "thought"

    def __init__(self, _data: Path) -> None:
        src, self.source = faq_dir()
        self.entries = load_faq(src)
        self.queries = {f"q:{e.eid}": e.question for e in self.entries}
        self.pairs = [(f"q:{e.eid}", e.eid) for e in self.entries]
        self.contents = [truncate_utf8(e.answer, MAX_TEXT_BYTES) for e in self.entries]
        self.corpus = self.contents
        self.doc_ids = [e.eid for e in self.entries]
        self.notes = thought_notes("answer texts")

    def fill(self, store: SqliteStore, embedder: LocalEmbedder) -> tuple[dict[str, Any], np.ndarray]:
        """Every answer through Memory.append_thought (link_duplicates=False)."""
        caller = Caller(agent_id="bench-eval")
        reqs = [AppendThoughtInput(repository=FAQ_REPO, type="FactLearned", content=c) for c in self.contents]
        unique = list(dict.fromkeys(self.contents))
        append = lambda memory, req: memory.append_thought(caller, req, link_duplicates=False)  # noqa: E731
        info, results, vectors = fill(store, embedder, unique, append, reqs, "appending answers")
        table = dict(zip(unique, vectors, strict=True))
        self.by_id = {r.thought_id: e.eid for e, r in zip(self.entries, results, strict=True)}
        self.row_keys = {r: self.by_id[t] for t, r in store.thought_rowids(list(self.by_id)).items()}
        return info, np.stack([table[c] for c in self.contents])

    def shipped(self, memory: Memory, caller: Caller, text: str) -> list[Any]:
        req = SearchThoughtsInput(query=text, repository=FAQ_REPO, limit=LIMIT)
        return [self.by_id[s.thought.thought_id] for s in memory.search_thoughts(caller, req).thoughts]

    def ranking(self, store: SqliteStore, ranked: list[retrieval.Scored]) -> list[Any]:
        return [self.row_keys[s.rowid] for s in ranked[:LIMIT]]

    def output(
        self, store: SqliteStore, methods: list[Method], edges_seen: int, fill: dict[str, Any]
    ) -> dict[str, Any]:
        results = [m.result(self.pairs) for m in methods]
        base = list(results[0]["ranks"].values())
        for r in results:
            r["vs_bm25s"] = paired(base, list(r["ranks"].values()))
        searched, fused = methods[-1], methods[-2]
        differ = sum(1 for q in self.queries if searched.rankings[q] != fused.rankings[q])
        return {
            "benchmark": "python-faq",
            "protocol": {
                "source": f"Debian {self.source}: html/_sources/faq/*.rst.txt (PSF License)",
                "repository": FAQ_REPO,
                "stored": "one thought per answer (type FactLearned, content = the answer's text with "
                "the reStructuredText markup dropped, question NOT stored), via "
                "Memory.append_thought(link_duplicates=False)",
                "query": "the question (the section heading), Memory.search_thoughts(limit 50)",
                "scoring": "rank of the question's own answer; R@1/5/10, MRR over the 50 (0 if absent)",
                "baselines": "bm25s and dense over the same answer texts, same run",
            },
            "environment": environment(),
            "counts": {
                "questions": len(self.entries),
                "files": len({e.eid.split("#")[0] for e in self.entries}),
                "thoughts_stored": len(self.row_keys),
            },
            "fill": fill,
            "shipped_parameters": shipped_parameters(),
            "graph_check": {
                "edges_from_top_seeds_all_queries": edges_seen,
                "queries_where_search_differs_from_fused": differ,
                "queries": len(self.queries),
            },
            "results": results,
        }

    def grid(self) -> list[Variant]:
        return faq_variant_grid()

    def variant_rows(self, methods: list[Method]) -> list[dict[str, Any]]:
        rows = [m.result(self.pairs) for m in methods]
        base = list(rows[0]["ranks"].values())
        for r in rows:
            r["vs_shipped"] = paired(base, list(r["ranks"].values()))
        return rows
