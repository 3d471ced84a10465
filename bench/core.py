"""Core latency benchmark for the SQLite store: record_attempt, search, open + verify.

    .venv/bin/python bench/core.py [--sizes 1000,10000,100000] [--repeats 3]
                                   [--out bench/results/core-sqlite.json] [--profile]
    .venv/bin/python bench/core.py --backend postgres [--sizes 10000,100000]

``--backend postgres`` starts a throwaway PostgreSQL + pgvector cluster (bench/pg_cluster.py,
server defaults, fsync on) and measures the same phases there, plus 8 concurrent writers, beside
the SQLite store measured in the same run (``--no-sqlite`` skips it).

For each size a fresh SQLite file is filled in bulk (the store's own ledger + derivation code,
``seal``/``canonical`` and ``_derive_attempt``, many attempts per transaction, random unit
vectors instead of the model: the real model embeds ~220 texts/s, 100k would take ~8 min).
On top of that file the real path is measured through ``Memory`` with the real local model.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

import mentis.retrieval as retrieval_mod
from mentis.embed.local import DIM, MODEL_ID, LocalEmbedder
from mentis.ledger import canonical, verify_rows
from mentis.memory import Memory
from mentis.model import Check, CodeContext, RecordAttemptInput, SearchInput
from mentis.progress import stderr_progress
from mentis.store import sqlite as sqlite_mod
from mentis.store.sqlite import SqliteStore

try:
    from mentis.service import Caller
except ImportError:  # older layout
    from mentis.memory import Caller  # type: ignore[attr-defined, no-redef]

TARGETS = {
    "search_p50_ms": 25.0,  # at 100k, including query embedding
    "record_p50_ms": 15.0,
    "verify_entries_per_s": 300_000.0,
}
FILL_BATCH = 2_000
ZIPF_EXPONENT = 1.1
ZIPF_OFFSET = 8.0
TAIL_TERMS = 30_000
SEED = 20240601

# ---------------------------------------------------------------- synthetic corpus

STOP = """
the a an and or but to of in on for with at by from is was are were be been it this that these
when then after before so because not no only also still again which while into
""".split()  # noqa: SIM905

CONTENT = """
error exception traceback failed failure passed test tests pytest unittest fixture mock patch
assert assertion timeout retry backoff deadlock race condition lock mutex thread async await
coroutine event loop future callback promise queue worker pool scheduler cron job task batch
stream buffer socket connection pool handshake tls certificate proxy dns request response
header cookie session token auth oauth jwt login logout permission role scope middleware
router handler endpoint route controller view template render component state props hook
reducer store redux cache redis memcached eviction ttl invalidation key value hash index btree
query join migration schema table column row primary foreign constraint transaction commit
rollback savepoint isolation postgres mysql sqlite orm model serializer validator pydantic
dataclass typing annotation generic protocol interface abstract inheritance mixin decorator
closure lambda iterator generator comprehension slice tuple dict list set frozenset bytes
string unicode encoding utf8 decode json yaml toml config settings environment variable secret
dotenv flag option argument parser cli command subprocess shell pipe signal sigterm exit code
stdout stderr logging logger level debug info warning trace span metric prometheus grafana
alert dashboard latency throughput memory leak heap stack overflow recursion segfault core
dump profiler flamegraph benchmark regression performance optimize vectorize numpy pandas
dataframe array matrix tensor gpu cuda kernel batch gradient loss optimizer learning rate
epoch checkpoint dataset loader tokenizer embedding vector similarity cosine search ranking
bm25 index shard replica cluster node kubernetes pod deployment service ingress helm chart
docker image container volume mount registry build dockerfile layer cache ci pipeline github
actions workflow runner artifact release tag version semver dependency lockfile pip poetry npm
yarn webpack vite bundle minify typescript javascript python rust golang java kotlin compile
linker symbol undefined import module package namespace circular relative absolute path file
directory permission denied read write append truncate rename delete glob watch inotify
filesystem disk quota full inode symlink windows linux macos unicode locale timezone utc
datetime timestamp parse format iso offset daylight leap calendar http grpc websocket rest
graphql pagination cursor offset limit filter sort order group aggregate count sum average
percentile histogram sample random seed deterministic flaky intermittent reproduce bisect
blame revert cherry pick rebase merge conflict branch main upstream fork pull review approve
comment lint ruff mypy flake8 black format style warning deprecation upgrade downgrade pin
compatible breaking change api client sdk wrapper adapter plugin extension hookspec entrypoint
registry factory singleton dependency injection container
""".split()  # noqa: SIM905

TAGS = """
bug flaky perf regression security refactor feature docs ci build deps typing db cache network
auth api cli ui migration infra test hotfix windows async memory
""".split()  # noqa: SIM905

REPOS = (
    "acme/api", "acme/web", "acme/infra", "oss/parser", "oss/cli", "tools/build",
    "data/pipeline", "ml/train",
)  # fmt: skip
REPO_WEIGHTS = np.array([30, 20, 12, 10, 8, 8, 7, 5], dtype=float)
AGENTS = ("claude-code", "codex", "cursor-agent", "aider", "devin")
DIRS = ("src", "lib", "app", "tests", "scripts", "pkg")
EXTS = (".py", ".ts", ".rs", ".go", ".py", ".py", ".tsx", ".sql", ".toml")


class Corpus:
    """Zipf-distributed words from a technical vocabulary, so queries have real matches."""

    def __init__(self, seed: int, stream: int = 0) -> None:
        """``seed`` fixes the vocabulary and files; ``stream`` the texts drawn from them."""
        self.rng = np.random.default_rng(seed)
        words = list(dict.fromkeys(CONTENT))
        # A long tail, as real notes have: CamelCase identifiers and snake_case names built from
        # the vocabulary, pseudo-words (library and product names) and error codes.
        syl = "ka lo mi ne ru ta vo zen qui dra pex lin tor bex fu gra sol vin".split()  # noqa: SIM905
        extra: set[str] = set()
        while len(extra) < TAIL_TERMS:
            r = self.rng.random()
            if r < 0.45:
                a, b = self.rng.choice(len(words), 2, replace=False)
                extra.add(words[a].capitalize() + words[b].capitalize())
            elif r < 0.65:
                a, b = self.rng.choice(len(words), 2, replace=False)
                extra.add(f"{words[a]}_{words[b]}")
            elif r < 0.9:
                extra.add("".join(self.rng.choice(syl, int(self.rng.integers(2, 4)))))
            else:
                extra.add(f"{'EWX'[int(self.rng.integers(3))]}{int(self.rng.integers(100, 10_000))}")
        # Plain words take the frequent ranks, the tail the rest; the Zipf-Mandelbrot offset
        # keeps the head from being in every document.
        head = [words[i] for i in self.rng.permutation(len(words))]
        tail = sorted(extra)
        tail = [tail[i] for i in self.rng.permutation(len(tail))]
        self.vocab = np.array(head + tail, dtype=object)
        ranks = np.arange(1, len(self.vocab) + 1, dtype=float)
        p = 1.0 / (ranks + ZIPF_OFFSET) ** ZIPF_EXPONENT
        self.cdf = np.cumsum(p / p.sum())
        self.stop = np.array(STOP, dtype=object)
        self.files = {
            repo: [
                f"{DIRS[self.rng.integers(len(DIRS))]}/{self.word()}/{self.word().lower()}"
                f"{EXTS[self.rng.integers(len(EXTS))]}"
                for _ in range(150)
            ]
            for repo in REPOS
        }
        self.rng = np.random.default_rng([seed, stream])

        self._pool: list[str] = []
        self._at = 0

    def _zipf(self, n: int) -> np.ndarray:
        idx = np.searchsorted(self.cdf, self.rng.random(n))
        return self.vocab[np.minimum(idx, len(self.vocab) - 1)]

    def _refill(self) -> None:
        """Draw the next 200k running-text tokens at once: 30% stopwords, 70% Zipf words."""
        n = 200_000
        words = self._zipf(n)
        stop = self.rng.random(n) < 0.3
        words[stop] = self.rng.choice(self.stop, int(stop.sum()))
        self._pool, self._at = words.tolist(), 0

    def word(self) -> str:
        return str(self._zipf(1)[0])

    def text(self, n_words: int) -> str:
        if self._at + n_words > len(self._pool):
            self._refill()
        s = " ".join(self._pool[self._at : self._at + n_words])
        self._at += n_words
        return s[0].upper() + s[1:] + "."

    def hexid(self, n: int = 40) -> str:
        return self.rng.bytes(n // 2).hex()


class Workload:
    """Generates attempt bodies shaped exactly like ``Memory.record_attempt`` writes them."""

    def __init__(self, corpus: Corpus, n_target: int) -> None:
        self.c = corpus
        self.rng = corpus.rng
        self.n_tasks = max(8, n_target // 4)  # ~4 attempts per task
        self.task_repo = self.rng.choice(len(REPOS), self.n_tasks, p=REPO_WEIGHTS / REPO_WEIGHTS.sum())
        self.titles = {}
        self.clock = datetime(2025, 1, 1, tzinfo=UTC)

    def _task(self) -> tuple[str, str, str]:
        t = int(self.rng.integers(self.n_tasks))
        title = self.titles.get(t)
        if title is None:
            title = self.titles[t] = self.c.text(int(self.rng.integers(4, 10))).rstrip(".")
        return REPOS[self.task_repo[t]], f"T-{t:06d}", title

    def fields(self) -> dict[str, Any]:
        """The caller-supplied fields (what a RecordAttemptInput carries)."""
        rng, c = self.rng, self.c
        repo, task_id, title = self._task()
        files = list(dict.fromkeys(c.files[repo][int(i)] for i in rng.integers(0, 150, rng.integers(1, 5))))
        f: dict[str, Any] = {
            "repository": repo,
            "task_id": task_id,
            "action": c.text(int(rng.integers(10, 21))),
            "files": files,
            "observation": c.text(int(rng.integers(40, 81))),
            "tags": sorted({TAGS[int(i)] for i in rng.integers(0, len(TAGS), rng.integers(1, 4))}),
        }
        if rng.random() < 0.6:
            f["task_title"] = title
        if rng.random() < 0.5:
            f["inference"] = c.text(int(rng.integers(8, 20)))
        ctx: dict[str, Any] = {"commit": c.hexid(), "branch": f"feat/{c.word().lower()[:40]}"}
        if rng.random() < 0.5:
            ctx["dirty"] = bool(rng.random() < 0.3)
            ctx["file_hashes"] = {p: c.hexid() for p in files}
        f["code_context"] = ctx
        if rng.random() < 0.7:
            ok = bool(rng.random() < 0.5)
            f["check"] = {
                "command": f"pytest tests/test_{c.word().lower()[:30]}.py -q",
                "status": "passed" if ok else "failed",
                "exit_code": 0 if ok else 1,
                "output": c.text(int(rng.integers(5, 30))),
            }
        return f

    def body(self) -> tuple[dict[str, Any], str]:
        """A full attempt body (as Memory builds it) and its created_at."""
        f = self.fields()
        self.clock += timedelta(seconds=float(self.rng.integers(1, 600)))
        at = self.clock.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body: dict[str, Any] = {
            "attempt_id": str(uuid.UUID(bytes=self.rng.bytes(16), version=4)),
            "repository": f["repository"],
            "task_id": f["task_id"],
            "agent_id": AGENTS[int(self.rng.integers(len(AGENTS)))],
            "action": f["action"],
            "files": f["files"],
            "observation": f["observation"],
            "tags": f["tags"],
            "created_at": at,
            "session_id": f"s-{self.rng.integers(1 << 30):08x}",
        }
        for k in ("task_title", "inference", "code_context", "check"):
            if k in f:
                body[k] = f[k]
        return body, at

    def record_input(self) -> RecordAttemptInput:
        f = self.fields()
        return RecordAttemptInput(
            repository=f["repository"],
            task_id=f["task_id"],
            task_title=f.get("task_title"),
            code_context=CodeContext(**f["code_context"]),
            action=f["action"],
            files=f["files"],
            observation=f["observation"],
            inference=f.get("inference"),
            check=Check(**f["check"]) if "check" in f else None,
            tags=f["tags"],
        )

    def queries(self, n: int = 50) -> list[SearchInput]:
        """Varied queries: keywords, questions, pasted errors, file names; some repo-scoped."""
        rng, c = self.rng, self.c
        out: list[SearchInput] = []
        templates = (
            "why does {a} fail with {b}",
            "how did we fix the {a} {b} problem",
            "{a} {b} {c}",
            "{a} error when {b} {c} in {d}",
            "flaky {a} test after {b} change",
            "{a}",
        )
        for i in range(n):
            kind = i % 5
            if kind == 0:  # a few keywords
                q = " ".join(c.word() for _ in range(int(rng.integers(1, 4))))
            elif kind == 1:
                t = templates[int(rng.integers(len(templates)))]
                q = t.format(a=c.word(), b=c.word(), c=c.word(), d=c.word())
            elif kind == 2:
                q = c.text(int(rng.integers(6, 12)))
            elif kind == 3:  # a pasted traceback / log excerpt
                q = "Traceback: " + c.text(int(rng.integers(20, 40)))
            else:
                repo = REPOS[int(rng.integers(len(REPOS)))]
                q = c.files[repo][int(rng.integers(150))] + " " + c.text(int(rng.integers(3, 7)))
            repository = REPOS[int(rng.integers(3))] if i % 4 == 3 else None
            out.append(SearchInput(query=q, repository=repository, limit=10))
        return out


# ---------------------------------------------------------------- embedders


class FixedEmbedder:
    """No embedding cost: a fixed unit vector, under the store's model id (passes every check)."""

    def __init__(self, model_id: str = MODEL_ID, dim: int = DIM) -> None:
        self.model_id = model_id
        self.dim = dim
        self._vec = np.zeros(dim, dtype=np.float32)
        self._vec[0] = 1.0

    def embed(self, texts: Any) -> np.ndarray:
        return np.tile(self._vec, (len(texts), 1))


# ---------------------------------------------------------------- helpers


def entry_cols() -> str:
    cols = getattr(sqlite_mod, "ENTRY_COLS", None) or getattr(sqlite_mod, "_ENTRY_COLS", None)
    if cols is None:
        from mentis.store import core

        cols = core.ENTRY_COLS
    return str(cols)


def attempt_index(store: SqliteStore) -> Any:
    """The in-process VectorIndex of attempt vectors (layout-independent)."""
    indexes = getattr(store, "_indexes", None)
    return indexes["vectors"] if indexes is not None else store._index  # type: ignore[attr-defined]


def refresh_attempt_index(store: SqliteStore) -> None:
    if hasattr(store, "_indexes"):
        store._refresh_index("vectors")
    else:
        store._refresh_index()  # type: ignore[call-arg]


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")


def summarize(runs: list[list[float]], cpu_runs: list[list[float]] | None = None) -> dict[str, Any]:
    """Per-run p50/p95 (ms), reported as the median over runs.

    ``cpu_runs`` are the process CPU times of the same calls (all threads, ORT's included): on a
    contended machine wall time rises while CPU time stays close to the idle wall time.
    """
    p50 = [pct(r, 50) for r in runs]
    p95 = [pct(r, 95) for r in runs]
    out = {
        "p50_ms": statistics.median(p50),
        "p95_ms": statistics.median(p95),
        "min_ms": min(min(r) for r in runs),
        "p50_runs_ms": p50,
        "p95_runs_ms": p95,
        "n_per_run": len(runs[0]) if runs else 0,
        "runs": len(runs),
    }
    if cpu_runs:
        out["cpu_p50_ms"] = statistics.median(pct(r, 50) for r in cpu_runs)
    return out


def attempt_text_of(req: RecordAttemptInput) -> str:
    parts = [req.task_title, req.action, req.observation, req.inference]
    return "\n".join(p for p in parts if p)


class Stopwatch:
    """Wall (perf_counter) and process CPU time of one call."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        c0, t0 = time.process_time(), time.perf_counter()
        yield
        self.wall.append((time.perf_counter() - t0) * 1000)
        self.cpu.append((time.process_time() - c0) * 1000)


def ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class Timers:
    """Wraps callables on objects/modules and accumulates their wall time per name."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        had_own = isinstance(owner, type(sys)) or attr in getattr(owner, "__dict__", {})

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                self.total[name] = self.total.get(name, 0.0) + (time.perf_counter() - t0) * 1000

        setattr(owner, attr, timed)
        if had_own:
            self._undo.append(lambda: setattr(owner, attr, original))
        else:
            self._undo.append(lambda: delattr(owner, attr))

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


@contextlib.contextmanager
def profiled(enabled: bool, label: str, sink: list[str]) -> Iterator[None]:
    if not enabled:
        yield
        return
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime")
        st.print_stats(15)
        sink.append(f"===== {label} (sorted by tottime) =====\n{buf.getvalue()}")


# ---------------------------------------------------------------- phases


def bulk_fill(path: Path, n: int, seed: int) -> dict[str, Any]:
    """Fill a fresh store with ``n`` attempts, ``FILL_BATCH`` per transaction, random vectors.

    Uses the store's own append + derivation code (same ledger entries, bodies, lexical rows,
    vectors and task index as ``append_attempt``), only batching the transactions.
    """
    t0 = time.perf_counter()
    wl = Workload(Corpus(seed), n)
    rng = np.random.default_rng(seed + 1)
    store = SqliteStore(path, DIM, verify=False)
    store.set_meta("embed_model", MODEL_ID)
    store.set_meta("embed_dim", str(DIM))
    gen_s = 0.0
    done = 0
    bar = stderr_progress()  # on stderr, only when it is a terminal
    job = bar.add_task(f"bulk fill: {n:,} attempts", total=n)
    bar.start()
    while done < n:
        k = min(FILL_BATCH, n - done)
        g0 = time.perf_counter()
        bodies = [wl.body() for _ in range(k)]
        vecs = rng.standard_normal((k, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        gen_s += time.perf_counter() - g0
        with store._write() as conn:
            for (body, at), vec in zip(bodies, vecs, strict=True):
                raw = canonical(body)
                rowid, _ = store._append(
                    conn, body["repository"], "attempt", body["attempt_id"], at, body["agent_id"], raw
                )
                store._derive_attempt(conn, rowid, body, vec)
        done += k
        bar.advance(job, k)
    bar.stop()
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    total = time.perf_counter() - t0
    return {
        "attempts": n,
        "seconds": total,
        "generate_seconds": gen_s,
        "attempts_per_s": n / total,
        "file_mb": path.stat().st_size / 1e6,
        "method": f"bulk: store._append + _derive_attempt, {FILL_BATCH}/transaction, random unit vectors",
    }


def measure_search(
    mem: Memory, caller: Caller, queries: list[SearchInput], repeats: int, prof: bool, sink: list[str]
) -> dict[str, Any]:
    # Cold: the first search loads every vector from SQLite into the in-process index.
    t0 = time.perf_counter()
    mem.search(caller, queries[0])
    cold = ms(t0)
    for q in queries[:5]:
        mem.search(caller, q)
    runs, cpu_runs = [], []
    hits = []
    for _ in range(repeats):
        sw = Stopwatch()
        for q in queries:
            with sw.time():
                res = mem.search(caller, q)
            hits.append(len(res.tasks))
        runs.append(sw.wall)
        cpu_runs.append(sw.cpu)
    out = summarize(runs, cpu_runs)
    out["cold_first_ms"] = cold
    out["mean_tasks_returned"] = float(np.mean(hits))
    tok = getattr(mem.embedder, "_tokenizer", None)
    if tok is not None:
        out["query_tokens_median"] = float(np.median([len(tok.encode(q.query).ids) for q in queries]))

    # Stage breakdown: one more pass with timing wrappers around each step Memory.search takes.
    timers = Timers()
    store = mem.store
    # (owner, attribute, label); labels starting with "  of which" are nested in the row above
    # and left out of the sum. Stages the current code does not have are skipped.
    stages = [
        (mem.embedder, "embed", "embed query"),
        (retrieval_mod, "query_terms", "query_terms"),
        (store, "lexical", "lexical (BM25)"),
        (store, "_refresh_lexicon", "  of which lexical index refresh check"),
        *(
            [
                (store, "_refresh_index", "vector: refresh check"),
                (attempt_index(store), "search", "vector: matmul+topk"),
            ]
            if isinstance(store, SqliteStore)
            else [(store, "vector", "vector (pgvector HNSW query)")]
        ),
        (retrieval_mod, "fuse", "fuse"),
        (mem, "_with_graph", "graph rerank (_with_graph)"),
        (store, "attempt_edges", "  of which attempt_edges SQL"),
        (store, "attempt_keys", "attempt_keys"),
        (retrieval_mod, "group_tasks", "group_tasks"),
        (store, "load_attempts", "load_attempts (bodies)"),
        (store, "task_info", "task_info"),
        (mem, "_rerank", "_rerank (LLM rerank, off)"),
    ]
    for owner, attr, label in stages:
        if hasattr(owner, attr):
            timers.wrap(owner, attr, label)
    lex_matches = []
    t0 = time.perf_counter()
    try:
        for q in queries:
            mem.search(caller, q)
    finally:
        timers.restore()
    total = ms(t0)
    breakdown = {
        lbl: timers.total.get(lbl, 0.0) / len(queries) for _, a, lbl in stages if lbl in timers.total
    }
    top_level = sum(v for k, v in breakdown.items() if not k.startswith("  of which"))
    breakdown["other (models, python)"] = total / len(queries) - top_level
    out["breakdown_mean_ms"] = breakdown

    if not isinstance(store, SqliteStore):
        return out
    # How many rows each lexical query touches (BM25 is computed for every matching row).
    total_rows = store.counts()["attempts"]
    for q in queries:
        match = retrieval_mod.query_terms(q.query)
        if match:
            lex_matches.append(len(store.lexical(match, None, total_rows)))
    out["lexical_scored_rows_median"] = float(np.median(lex_matches)) if lex_matches else 0.0
    out["lexical_scored_rows_max"] = int(max(lex_matches)) if lex_matches else 0

    # Raw vector cost on the loaded matrix.
    idx = attempt_index(store)
    qv = mem.embedder.embed([queries[0].query])[0]
    mat = idx._matrix[: len(idx)]
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        scores = mat @ qv
    matmul = ms(t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        top = np.argpartition(-scores, 199)[:200] if len(scores) > 200 else np.arange(len(scores))
        top[np.argsort(-scores[top], kind="stable")]
    topk = ms(t0) / reps
    out["vector_raw_ms"] = {"matmul": matmul, "argpartition+sort": topk, "rows": len(idx)}

    with profiled(prof, "search x len(queries)", sink):
        if prof:
            for q in queries:
                mem.search(caller, q)
    return out


def measure_records(
    store: SqliteStore,
    real: LocalEmbedder,
    wl: Workload,
    caller: Caller,
    repeats: int,
    n_real: int,
    n_fixed: int,
    prof: bool,
    sink: list[str],
) -> dict[str, Any]:
    mem_real = Memory(store, real)
    mem_fixed = Memory(store, FixedEmbedder())

    def run(mem: Memory, n: int) -> Stopwatch:
        inputs = [wl.record_input() for _ in range(n)]  # validation is the transport's, not timed
        sw = Stopwatch()
        for req in inputs:
            with sw.time():
                mem.record_attempt(caller, req)
        return sw

    def runs(mem: Memory, n: int) -> dict[str, Any]:
        sws = [run(mem, n) for _ in range(repeats)]
        return summarize([s.wall for s in sws], [s.cpu for s in sws])

    run(mem_real, 3)  # warm-up
    out: dict[str, Any] = {}
    texts = [attempt_text_of(wl.record_input()) for _ in range(50)]
    out["attempt_text_tokens_median"] = float(np.median([len(real._tokenizer.encode(t).ids) for t in texts]))
    out["real_model"] = runs(mem_real, n_real)
    out["no_embedding"] = runs(mem_fixed, n_fixed)

    # Breakdown of a real record.
    timers = Timers()
    timers.wrap(real, "embed", "embed attempt text")
    timers.wrap(store, "append_attempt", "append_attempt (txn + fsync)")
    for attr, name in (("has_rejections", "has_rejections"), ("secret_warnings", "secret_warnings")):
        if hasattr(mem_real, attr):
            owner = store if hasattr(store, attr) and attr == "has_rejections" else mem_real
            timers.wrap(owner, attr, name)
    inputs = [wl.record_input() for _ in range(n_real)]
    t0 = time.perf_counter()
    try:
        for req in inputs:
            mem_real.record_attempt(caller, req)
    finally:
        timers.restore()
    total = ms(t0)
    bd = {k: v / n_real for k, v in timers.total.items()}
    bd["other (body, uuid, models)"] = total / n_real - sum(bd.values())
    out["breakdown_real_mean_ms"] = bd

    if not isinstance(store, SqliteStore):
        return out
    # Experiment (bench connection only): the same no-embedding record with synchronous=NORMAL,
    # which in WAL mode skips the fsync at each commit (still durable against app crashes).
    store._conn.execute("PRAGMA synchronous=NORMAL")
    try:
        out["no_embedding_sync_normal"] = runs(mem_fixed, n_fixed)
    finally:
        store._conn.execute("PRAGMA synchronous=FULL")

    # Raw fsync latency of the temp directory's disk.
    probe = Path(store.path).with_suffix(".fsync")
    lat = []
    with open(probe, "wb") as fh:
        for _ in range(30):
            fh.write(b"x" * 4096)
            fh.flush()
            t0 = time.perf_counter()
            os.fsync(fh.fileno())
            lat.append(ms(t0))
    probe.unlink()
    out["disk_fsync_p50_ms"] = pct(lat, 50)

    with profiled(prof, f"record_attempt (real model) x {n_real}", sink):
        if prof:
            run(mem_real, n_real)
    return out


def measure_search_after_record(
    store: SqliteStore, real: LocalEmbedder, wl: Workload, caller: Caller, queries: list[SearchInput]
) -> dict[str, Any]:
    """An agent records, then searches: each search first refreshes the stale vector index."""
    mem_real = Memory(store, real)
    mem_fixed = Memory(store, FixedEmbedder())
    samples, refresh = [], []
    for q in queries[:20]:
        mem_fixed.record_attempt(caller, wl.record_input())
        t0 = time.perf_counter()
        refresh_attempt_index(store)
        refresh.append(ms(t0))
        mem_fixed.record_attempt(caller, wl.record_input())
        t0 = time.perf_counter()
        mem_real.search(caller, q)
        samples.append(ms(t0))
    return {"search_p50_ms": pct(samples, 50), "refresh_index_p50_ms": pct(refresh, 50)}


def measure_open(path: Path, runs: int, prof: bool, sink: list[str]) -> dict[str, Any]:
    probe = SqliteStore(path, DIM, verify=False)
    counts = probe.counts()
    probe.close()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s = SqliteStore(path, DIM)
        times.append(time.perf_counter() - t0)
        s.close()
    no_verify = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s = SqliteStore(path, DIM, verify=False)
        no_verify.append(time.perf_counter() - t0)
        s.close()
    # Split verify into its parts on a plain connection, with the store's own SQL.
    conn = sqlite3.connect(str(path), isolation_level=None)
    sql = (
        f"SELECT {entry_cols()}, b.body FROM entries e LEFT JOIN bodies b "
        "ON b.rowid = e.rowid ORDER BY e.chain, e.seq"
    )
    fetch, hashing, orphan = [], [], []
    for _ in range(runs):
        heads = {c: (s_, h) for c, s_, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        t0 = time.perf_counter()
        rows = conn.execute(sql).fetchall()
        fetch.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        verify_rows(rows, heads)
        hashing.append(time.perf_counter() - t0)
        del rows
        t0 = time.perf_counter()
        conn.execute(
            "SELECT b.rowid FROM bodies b LEFT JOIN entries e ON e.rowid = b.rowid "
            "WHERE e.rowid IS NULL LIMIT 1"
        ).fetchone()
        orphan.append(time.perf_counter() - t0)
    conn.close()
    with profiled(prof, "open + verify", sink):
        if prof:
            SqliteStore(path, DIM).close()
    med = statistics.median(times)
    return {
        "entries": counts["entries"],
        "chains": counts["chains"],
        "median_s": med,
        "runs_s": times,
        "entries_per_s": counts["entries"] / med,
        "open_without_verify_median_s": statistics.median(no_verify),
        "verify_parts_median_s": {
            "fetch rows (SQL join + ORDER BY)": statistics.median(fetch),
            "verify_rows (hash loop)": statistics.median(hashing),
            "orphan-body check": statistics.median(orphan),
        },
    }


def measure_embed_variants(real: LocalEmbedder, wl: Workload, rounds: int) -> dict[str, Any]:
    """Embedding latency of one attempt text / one query with the shipped session and with
    alternative onnxruntime thread settings (same graph, same weights)."""
    import onnxruntime as ort
    from safetensors.numpy import load_file

    from mentis.embed import local

    weights = load_file(str(local._model_dir() / "model.safetensors"))
    model_bytes = local.build_onnx_model(weights).SerializeToString()
    del weights

    def session(threads: int, spin: bool) -> LocalEmbedder:
        o = local._session_options()
        o.intra_op_num_threads = threads
        if not spin:
            o.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model_bytes, sess_options=o, providers=["CPUExecutionProvider"])
        return LocalEmbedder(sess, real._tokenizer)

    shipped = local._session_options()
    variants = {
        f"shipped ({shipped.intra_op_num_threads} threads, spinning)": real,
        "2 threads, allow_spinning=0": session(2, False),
        "1 thread": session(1, True),
    }
    attempts = [attempt_text_of(wl.record_input()) for _ in range(20)]
    queries = [q.query for q in wl.queries(20)]
    out: dict[str, Any] = {}
    for name, emb in variants.items():
        emb.embed(attempts[:2])
        res = {}
        for label, texts in (("attempt", attempts), ("query", queries)):
            per_round = []
            for _ in range(rounds):
                sw = Stopwatch()
                for t in texts:
                    with sw.time():
                        emb.embed([t])
                per_round.append(pct(sw.wall, 50))
            res[f"{label}_p50_ms"] = statistics.median(per_round)
        out[name] = res
    return out


# ---------------------------------------------------------------- postgres backend and writers


def pg_bulk_fill(url: str, n: int, seed: int) -> dict[str, Any]:
    """``bulk_fill`` for PostgreSQL: the store's own ``_append`` + ``_derive_attempt``,
    ``FILL_BATCH`` attempts per transaction (psycopg pipeline mode); the HNSW index is dropped
    for the fill and built once afterwards with ``CREATE INDEX``. Same workload and random unit
    vectors as the SQLite fill of the same size."""
    from mentis.store.postgres import PostgresStore

    t0 = time.perf_counter()
    wl = Workload(Corpus(seed), n)
    rng = np.random.default_rng(seed + 1)
    store = PostgresStore(url, DIM, verify=False)
    store.set_meta("embed_model", MODEL_ID)
    store.set_meta("embed_dim", str(DIM))
    with store._write() as conn:
        conn.execute("DROP INDEX vectors_hnsw")
    gen_s, done = 0.0, 0
    while done < n:
        k = min(FILL_BATCH, n - done)
        g0 = time.perf_counter()
        bodies = [wl.body() for _ in range(k)]
        vecs = rng.standard_normal((k, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        gen_s += time.perf_counter() - g0
        with store._write(*REPOS) as conn, conn.pipeline():  # fewer round trips, same statements
            for (body, at), v in zip(bodies, vecs, strict=True):
                raw = canonical(body)
                rowid, _ = store._append(
                    conn, body["repository"], "attempt", body["attempt_id"], at, body["agent_id"], raw
                )
                store._derive_attempt(conn, rowid, body, v)
        done += k
    rows_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with store._pool.connection() as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")  # this session only
        conn.execute("CREATE INDEX vectors_hnsw ON vectors USING hnsw (vec vector_cosine_ops)")
        conn.execute("ANALYZE")
        conn.execute("CHECKPOINT")
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    index_s = time.perf_counter() - t1
    store.close()
    total = time.perf_counter() - t0
    return {
        "attempts": n,
        "seconds": total,
        "rows_seconds": rows_s,
        "hnsw_build_seconds": index_s,
        "generate_seconds": gen_s,
        "attempts_per_s": n / total,
        "file_mb": size / 1e6,
        "method": f"bulk: store._append + _derive_attempt, {FILL_BATCH}/transaction, random unit vectors, "
        "HNSW index built after the rows (maintenance_work_mem=512MB in the fill session)",
    }


def pg_measure_open(url: str, runs: int) -> dict[str, Any]:
    from mentis.store.postgres import PostgresStore

    probe = PostgresStore(url, DIM, verify=False)
    counts = probe.counts()
    times, no_verify, verify_only = [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        probe.verify()
        verify_only.append(time.perf_counter() - t0)
    probe.close()
    for _ in range(runs):
        t0 = time.perf_counter()
        s = PostgresStore(url, DIM)
        times.append(time.perf_counter() - t0)
        s.close()
        t0 = time.perf_counter()
        s = PostgresStore(url, DIM, verify=False)
        no_verify.append(time.perf_counter() - t0)
        s.close()
    med = statistics.median(times)
    return {
        "entries": counts["entries"],
        "chains": counts["chains"],
        "median_s": med,
        "runs_s": times,
        "entries_per_s": counts["entries"] / med,
        "open_without_verify_median_s": statistics.median(no_verify),
        "verify_parts_median_s": {
            "verify() alone (server cursor + verify_rows)": statistics.median(verify_only)
        },
    }


WRITERS = 8
WRITES_PER_WRITER = 25


def measure_writers(
    stores: Callable[[], Any], wl: Workload, caller: Caller, repeats: int, shared: Any | None
) -> dict[str, Any]:
    """8 writer threads recording (no embedding) into one repository vs. one repository each.

    ``shared``: one store used by every thread (PostgreSQL: its pool of 8 connections); None:
    each thread opens its own store with ``stores()`` (SQLite: its own connection, as 8
    processes would; the threads share the GIL, so this is a floor on what processes reach)."""
    out: dict[str, Any] = {}
    for mode in ("1 repository", "8 repositories"):
        per_run = []
        for _ in range(repeats):
            inputs = []
            for i in range(WRITERS):
                repo = REPOS[0] if mode == "1 repository" else REPOS[i]
                inputs.append(
                    [
                        wl.record_input().model_copy(update={"repository": repo})
                        for _ in range(WRITES_PER_WRITER)
                    ]
                )
            own = [shared or stores() for _ in range(WRITERS)]
            lat: list[list[float]] = [[] for _ in range(WRITERS)]
            errors: list[BaseException] = []
            barrier = threading.Barrier(WRITERS + 1)

            def work(i: int, ctx: tuple[Any, ...] = (lat, own, inputs, errors, barrier)) -> None:
                lat, own, inputs, errors, barrier = ctx
                mem = Memory(own[i], FixedEmbedder())
                barrier.wait()
                try:
                    for req in inputs[i]:
                        t0 = time.perf_counter()
                        mem.record_attempt(caller, req)
                        lat[i].append(ms(t0))
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(WRITERS)]
            for t in threads:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            if shared is None:
                for s in own:
                    s.close()
            if errors:
                raise errors[0]
            flat = [x for r in lat for x in r]
            per_run.append(
                {"writes_per_s": len(flat) / wall, "p50_ms": pct(flat, 50), "p95_ms": pct(flat, 95)}
            )
        out[mode] = {
            "writes_per_s": statistics.median(r["writes_per_s"] for r in per_run),
            "p50_ms": statistics.median(r["p50_ms"] for r in per_run),
            "p95_ms": statistics.median(r["p95_ms"] for r in per_run),
            "runs": per_run,
        }
    out["method"] = (
        f"{WRITERS} threads x {WRITES_PER_WRITER} Memory.record_attempt each (FixedEmbedder), "
        "started on a barrier; median over repeats"
    )
    return out


def run_size(
    backend: str,
    n: int,
    args: argparse.Namespace,
    real: LocalEmbedder,
    caller: Caller,
    profiles: list[str],
    tmp: Path,
    cluster: Any = None,
) -> dict[str, Any]:
    """Fill a fresh store of ``n`` attempts and measure search, record, open + verify (and, with
    ``args.writers``, concurrent writers) on it."""
    load_before = os.getloadavg()[0]
    tag = f"[{backend} {n:,}]"
    print(f"{tag} filling ... (load average {load_before:.2f})", flush=True)
    if backend == "sqlite":
        path = tmp / f"core-{n}.sqlite"
        fill = bulk_fill(path, n, SEED + n)

        def open_store(verify: bool = True) -> Any:
            return SqliteStore(path, DIM, verify=verify)
    else:
        from mentis.store.postgres import PostgresStore

        url = cluster.new_database(f"core_{n}")
        fill = pg_bulk_fill(url, n, SEED + n)

        def open_store(verify: bool = True) -> Any:
            return PostgresStore(url, DIM, verify=verify)

    rate, mb = fill["attempts_per_s"], fill["file_mb"]
    print(f"{tag} filled in {fill['seconds']:.1f} s ({rate:,.0f}/s, {mb:.0f} MB)", flush=True)
    # Queries and new records come from the same vocabulary/distribution as the fill.
    wl = Workload(Corpus(SEED + n, stream=1), n)
    queries = wl.queries(50)
    store = open_store()
    try:
        mem = Memory(store, real)
        print(f"{tag} search ...", flush=True)
        search = measure_search(mem, caller, queries, args.repeats, args.profile, profiles)
        print(f"{tag} record ...", flush=True)
        record = measure_records(
            store, real, wl, caller, args.repeats, args.records, args.records_fixed, args.profile, profiles
        )
        after = measure_search_after_record(store, real, wl, caller, queries) if backend == "sqlite" else None
        writers = None
        if args.writers:
            print(f"{tag} {WRITERS} concurrent writers ...", flush=True)
            shared = store if backend == "postgres" else None
            writers = measure_writers(lambda: open_store(False), wl, caller, args.repeats, shared)
    finally:
        store.close()
    print(f"{tag} open + verify ...", flush=True)
    if backend == "sqlite":
        opened = measure_open(path, args.open_runs, args.profile, profiles)
    else:
        opened = pg_measure_open(url, args.open_runs)
    out = {
        "backend": backend,
        "size": n,
        "fill": fill,
        "search": search,
        "record": record,
        "open": opened,
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
    }
    if after is not None:
        out["search_after_record"] = after
    if writers is not None:
        out["writers"] = writers
    return out


def print_compare(report: dict[str, Any]) -> None:
    """The side-by-side table of ``--backend postgres``: each size, each backend."""
    m = report["machine"]
    print()
    print(f"machine: {m['cpu']}, {m['cores']} cores; python {m['python']}, sqlite {m['sqlite']}")
    print(f"postgres: {report.get('postgres_settings')}")
    cols = report["sizes"]
    w = 13
    hdr = f"{'metric':<40}" + "".join(
        f"{r['backend'][:6] + ' ' + format(r['size'] // 1000) + 'k':>{w}}" for r in cols
    )
    print(hdr)
    print("-" * len(hdr))

    def row(label: str, get: Callable[[dict[str, Any]], Any], fmt: str) -> None:
        cells = ""
        for r in cols:
            try:
                v = get(r)
                cells += f"{format(v, fmt):>{w}}"
            except (KeyError, TypeError):
                cells += f"{'-':>{w}}"
        print(f"{label:<40}{cells}")

    row("load average 1m (before size)", lambda r: r["loadavg_1m_before"], ".2f")
    row("fill s (bulk)", lambda r: r["fill"]["seconds"], ".1f")
    row("record p50 ms (real model)", lambda r: r["record"]["real_model"]["p50_ms"], ".1f")
    row("record p95 ms (real model)", lambda r: r["record"]["real_model"]["p95_ms"], ".1f")
    row("record p50 ms (no embedding)", lambda r: r["record"]["no_embedding"]["p50_ms"], ".2f")
    row("record p95 ms (no embedding)", lambda r: r["record"]["no_embedding"]["p95_ms"], ".2f")
    row("search p50 ms (real model, incl. embed)", lambda r: r["search"]["p50_ms"], ".1f")
    row("search p95 ms", lambda r: r["search"]["p95_ms"], ".1f")
    row("search cold first ms", lambda r: r["search"]["cold_first_ms"], ".1f")
    row("open+verify s", lambda r: r["open"]["median_s"], ".3f")
    row("open+verify entries/s", lambda r: r["open"]["entries_per_s"], ",.0f")
    for mode in ("1 repository", "8 repositories"):
        row(f"8 writers, {mode}: writes/s", lambda r, mode=mode: r["writers"][mode]["writes_per_s"], ",.0f")
        row(f"8 writers, {mode}: p50 ms", lambda r, mode=mode: r["writers"][mode]["p50_ms"], ".1f")
    print("search breakdown, mean ms per query:")
    stages: list[str] = []
    for r in cols:
        stages += [k for k in r["search"]["breakdown_mean_ms"] if k not in stages]
    for st in stages:
        row(f"  {st}"[:40], lambda r, st=st: r["search"]["breakdown_mean_ms"][st], ".2f")
    print("record breakdown (real model), mean ms:")
    stages = []
    for r in cols:
        stages += [k for k in r["record"]["breakdown_real_mean_ms"] if k not in stages]
    for st in stages:
        row(f"  {st}"[:40], lambda r, st=st: r["record"]["breakdown_real_mean_ms"][st], ".2f")
    print(f"total wall time {report['wall_seconds']:.0f} s")


def main_postgres(args: argparse.Namespace, sizes: list[int]) -> None:
    from pg_cluster import throwaway_cluster  # bench/pg_cluster.py

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="mentis-bench-"))
    real = LocalEmbedder.load()
    caller = Caller(agent_id="bench-agent", session_id="bench")
    report: dict[str, Any] = {
        "machine": machine(),
        "model": MODEL_ID,
        "config": vars(args),
        "code": code_version(),
        "sizes": [],
    }
    profiles: list[str] = []
    try:
        with throwaway_cluster() as cluster:
            report["postgres_settings"] = cluster.settings()
            print(f"postgres cluster: {report['postgres_settings']}", flush=True)
            for n in sizes:
                if not args.no_sqlite:
                    report["sizes"].append(run_size("sqlite", n, args, real, caller, profiles, tmp))
                report["sizes"].append(run_size("postgres", n, args, real, caller, profiles, tmp, cluster))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["wall_seconds"] = time.perf_counter() - started
    print_compare(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"wrote {out}")


# ---------------------------------------------------------------- machine


def code_version() -> dict[str, Any]:
    """The commit measured and whether src/ had uncommitted changes (read-only git calls)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*a: str) -> str:
        try:
            return subprocess.run(
                ["git", *a], cwd=root, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "src_dirty": bool(git("status", "--porcelain", "--", "src")),
    }


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import onnxruntime

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": onnxruntime.__version__,
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------- report


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    print()
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; python {m['python']}, numpy {m['numpy']}, "
        f"onnxruntime {m['onnxruntime']}, sqlite {m['sqlite']}"
    )
    print(
        "fill: bulk (store's own append/derive code, 2k attempts/txn, random unit vectors); "
        "record/search measured on top with the real model"
    )
    print()
    sizes = [r["size"] for r in report["sizes"]]
    w = 14
    hdr = f"{'metric':<44}" + "".join(f"{s:>{w},}" for s in sizes) + "   target"
    print(hdr)
    print("-" * len(hdr))

    def row(
        label: str,
        get: Callable[[dict[str, Any]], float],
        fmt: str,
        target: str = "",
        ok: Callable[[float], bool] | None = None,
    ) -> None:
        cells = ""
        for r in report["sizes"]:
            v = get(r)
            mark = ""
            if ok is not None:
                mark = " ✓" if ok(v) else " ✗"
            cells += f"{format(v, fmt) + mark:>{w}}"
        print(f"{label:<44}{cells}   {target}")

    t = TARGETS
    row("fill seconds (bulk)", lambda r: r["fill"]["seconds"], ".1f")
    row(
        "load average (1 min) after the size",
        lambda r: r["loadavg_1m_after"],
        ".2f",
        f"(cores: {m['cores']}; > cores = contended)",
    )
    row(
        "search p50 ms (real model, incl. embed)",
        lambda r: r["search"]["p50_ms"],
        ".1f",
        f"<= {t['search_p50_ms']:g} ms @100k",
        lambda v: v <= t["search_p50_ms"],
    )
    row("search p95 ms", lambda r: r["search"]["p95_ms"], ".1f")
    row("search p50 process-CPU ms", lambda r: r["search"]["cpu_p50_ms"], ".1f")
    row("search cold first (loads vector index) ms", lambda r: r["search"]["cold_first_ms"], ".1f")
    row("search right after a record p50 ms", lambda r: r["search_after_record"]["search_p50_ms"], ".1f")
    row(
        "record p50 ms (real model)",
        lambda r: r["record"]["real_model"]["p50_ms"],
        ".1f",
        f"<= {t['record_p50_ms']:g} ms",
        lambda v: v <= t["record_p50_ms"],
    )
    row("record p95 ms (real model)", lambda r: r["record"]["real_model"]["p95_ms"], ".1f")
    row("record p50 process-CPU ms (real model)", lambda r: r["record"]["real_model"]["cpu_p50_ms"], ".1f")
    row("  attempt text tokens (median)", lambda r: r["record"]["attempt_text_tokens_median"], ".0f")
    row(
        "record p50 ms (no embedding)",
        lambda r: r["record"]["no_embedding"]["p50_ms"],
        ".1f",
        f"<= {t['record_p50_ms']:g} ms",
        lambda v: v <= t["record_p50_ms"],
    )
    row("record p95 ms (no embedding)", lambda r: r["record"]["no_embedding"]["p95_ms"], ".1f")
    row(
        "  same, synchronous=NORMAL p50 ms (expt)",
        lambda r: r["record"]["no_embedding_sync_normal"]["p50_ms"],
        ".2f",
    )
    row("open+verify median s", lambda r: r["open"]["median_s"], ".3f")
    row(
        "open+verify entries/s",
        lambda r: r["open"]["entries_per_s"],
        ",.0f",
        f">= {t['verify_entries_per_s']:,.0f}/s",
        lambda v: v >= t["verify_entries_per_s"],
    )
    print()
    print("search stage breakdown, mean ms per query:")
    stages = list(report["sizes"][-1]["search"]["breakdown_mean_ms"])
    for st in stages:
        row(f"  {st}", lambda r, st=st: r["search"]["breakdown_mean_ms"].get(st, 0.0), ".2f")
    row("  raw matmul (N x 384 @ q)", lambda r: r["search"]["vector_raw_ms"]["matmul"], ".2f")
    row("  query tokens (median)", lambda r: r["search"].get("query_tokens_median", 0), ".0f")
    row("  rows BM25 scores per query (median)", lambda r: r["search"]["lexical_scored_rows_median"], ",.0f")
    print("record breakdown (real model), mean ms:")
    for st in report["sizes"][-1]["record"]["breakdown_real_mean_ms"]:
        row(f"  {st}", lambda r, st=st: r["record"]["breakdown_real_mean_ms"][st], ".2f")
    row("  disk fsync p50 ms (probe)", lambda r: r["record"]["disk_fsync_p50_ms"], ".2f")
    print("open+verify breakdown, median s (parts: the one-pass verifier, which open uses below")
    print("  4,000 entries or when the parallel block scan has any doubt):")
    row("  open without verify", lambda r: r["open"]["open_without_verify_median_s"], ".3f")
    for st in report["sizes"][-1]["open"]["verify_parts_median_s"]:
        row(f"  {st}", lambda r, st=st: r["open"]["verify_parts_median_s"][st], ".3f")
    print()
    print("embedding one text (p50 ms), shipped session vs. onnxruntime thread settings:")
    for name, res in report.get("embed_variants", {}).items():
        print(f"  {name:<42} attempt {res['attempt_p50_ms']:6.1f}   query {res['query_p50_ms']:6.1f}")
    print()
    big = report["sizes"][-1]
    checks = [
        ("search p50 @ largest size", big["search"]["p50_ms"] <= t["search_p50_ms"]),
        ("record p50 (real model) @ largest", big["record"]["real_model"]["p50_ms"] <= t["record_p50_ms"]),
        (
            "record p50 (no embedding) @ largest",
            big["record"]["no_embedding"]["p50_ms"] <= t["record_p50_ms"],
        ),
        ("open+verify entries/s @ largest", big["open"]["entries_per_s"] >= t["verify_entries_per_s"]),
    ]
    for name, ok in checks:
        print(f"  {verdict(ok)}  {name} ({big['size']:,})")
    print(f"total wall time {report['wall_seconds']:.0f} s")


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--records", type=int, default=40, help="real-model records per run")
    ap.add_argument("--records-fixed", type=int, default=100, help="no-embedding records per run")
    ap.add_argument("--open-runs", type=int, default=5)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--no-sqlite", action="store_true", help="postgres: skip the SQLite side-by-side run")
    ap.add_argument("--out", default=None, help="default bench/results/core-<backend>.json")
    ap.add_argument("--profile", action="store_true", help="cProfile the hot paths at each size")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.out = args.out or f"bench/results/core-{args.backend}.json"
    args.writers = args.backend == "postgres"
    if args.backend == "postgres":
        main_postgres(args, sizes)
        return

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="mentis-bench-"))
    t0 = time.perf_counter()
    real = LocalEmbedder.load()
    load_s = time.perf_counter() - t0
    report: dict[str, Any] = {
        "machine": machine(),
        "model": MODEL_ID,
        "model_load_s": load_s,
        "targets": TARGETS,
        "temp_dir": str(tmp),
        "config": vars(args),
        "code": code_version(),
        "sizes": [],
    }
    caller = Caller(agent_id="bench-agent", session_id="bench")
    profiles: list[str] = []
    try:
        for n in sizes:
            path = tmp / f"core-{n}.sqlite"
            load_before = os.getloadavg()[0]
            print(f"[{n:,}] filling ... (load average {load_before:.2f})", flush=True)
            fill = bulk_fill(path, n, SEED + n)
            print(
                f"[{n:,}] filled in {fill['seconds']:.1f} s ({fill['attempts_per_s']:,.0f}/s, "
                f"{fill['file_mb']:.0f} MB)",
                flush=True,
            )
            # Queries and new records come from the same vocabulary/distribution as the fill.
            wl = Workload(Corpus(SEED + n, stream=1), n)
            queries = wl.queries(50)
            store = SqliteStore(path, DIM)
            try:
                mem = Memory(store, real)
                print(f"[{n:,}] search ...", flush=True)
                search = measure_search(mem, caller, queries, args.repeats, args.profile, profiles)
                print(f"[{n:,}] record ...", flush=True)
                record = measure_records(
                    store,
                    real,
                    wl,
                    caller,
                    args.repeats,
                    args.records,
                    args.records_fixed,
                    args.profile,
                    profiles,
                )
                after = measure_search_after_record(store, real, wl, caller, queries)
            finally:
                store.close()
            print(f"[{n:,}] open + verify ...", flush=True)
            opened = measure_open(path, args.open_runs, args.profile, profiles)
            report["sizes"].append(
                {
                    "size": n,
                    "fill": fill,
                    "search": search,
                    "record": record,
                    "search_after_record": after,
                    "open": opened,
                    "loadavg_1m_before": load_before,
                    "loadavg_1m_after": os.getloadavg()[0],
                }
            )
            if profiles:
                profiles.insert(len(profiles) - 3, f"################ size {n:,}\n")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("embedding variants ...", flush=True)
    report["embed_variants"] = measure_embed_variants(
        real, Workload(Corpus(SEED, stream=7), 1000), max(1, args.repeats)
    )
    report["wall_seconds"] = time.perf_counter() - started
    print_report(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"wrote {out}")
    if profiles:
        prof_out = out.with_name(out.stem + "-profile.txt")
        prof_out.write_text("\n".join(profiles))
        print(f"wrote {prof_out}")


if __name__ == "__main__":
    main()
