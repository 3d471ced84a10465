"""The synthetic workload every bench shares: a Zipf corpus over a technical vocabulary, attempt
bodies and record inputs shaped like ``Memory.record_attempt``'s, varied queries, and an embedder
with no cost. Same seed, same data: figures from different runs and modules are comparable."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from mentis.api.attempts import Check, CodeContext, RecordAttemptInput, SearchInput
from mentis.ledger.bodies import attempt_text
from mentis.providers.embed.local import DIM, MODEL_ID

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
        self.titles: dict[int, str] = {}
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


def attempt_text_of(req: RecordAttemptInput) -> str:
    """The text record_attempt embeds for ``req`` (the service's own rule, records.attempt_text)."""
    return attempt_text(req.model_dump(exclude_none=True))
