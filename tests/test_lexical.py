"""The in-process BM25 index against SQLite's own FTS5 ``bm25()`` on the same documents."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mentis.api.attempts import ForgetInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.index import lexical
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SCHEMA_VERSION, SqliteStore

from .conftest import REPO

WORDS = [f"w{i}" for i in range(60)] + ["error", "fails", "failing", "database", "locked", "running"]
WEIGHTS = (3.0, 1.0, 0.5)


def _docs(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    def text(k: int) -> str:
        # skewed, so some words are in most documents and some in few
        return " ".join(WORDS[min(int(rng.paretovariate(1.0)) - 1, len(WORDS) - 1)] for _ in range(k))

    return [(text(rng.randint(0, 4)), text(rng.randint(1, 30)), text(rng.randint(0, 8))) for _ in range(n)]


def _fts(docs: list[tuple[str, str, str]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(a, b, c, tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.executemany(
        "INSERT INTO f(rowid, a, b, c) VALUES(?,?,?,?)", [(i + 1, *d) for i, d in enumerate(docs)]
    )
    return conn


def _rows(docs: list[tuple[str, str, str]], vocab: dict[str, int]) -> list[lexical.DocRow]:
    return [
        lexical.document_row(i + 1, "r" if i % 3 else "s", fields, WEIGHTS, vocab)
        for i, fields in enumerate(docs)
    ]


def _index(docs: list[tuple[str, str, str]], one_by_one: bool) -> tuple[lexical.LexicalIndex, dict[str, int]]:
    vocab: dict[str, int] = {}
    rows = _rows(docs, vocab)
    index = lexical.LexicalIndex()
    if one_by_one:
        index.add(rows[:1])
        for row in rows[1:]:
            index.add([row])
    else:
        index.add(rows)
    return index, vocab


def _query(vocab: dict[str, int], words: list[str]) -> list[int]:
    analyzer = lexical.analyzer()
    return [vocab[t] for w in words for t in analyzer.terms(w) if t in vocab]


@pytest.mark.parametrize("one_by_one", [False, True])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 400), k=st.integers(1, 6))
@settings(max_examples=40, deadline=None)
def test_scores_and_order_match_fts5_bm25(seed: int, n: int, k: int, one_by_one: bool) -> None:
    rng = random.Random(seed)
    docs = _docs(rng, n)
    words = rng.sample(WORDS, k)
    words += rng.sample(words, rng.randint(0, k))  # repeated query words count once per occurrence
    conn = _fts(docs)
    expected = conn.execute(
        "SELECT rowid, -bm25(f, 3.0, 1.0, 0.5) AS s FROM f WHERE f MATCH ? ORDER BY s DESC, rowid",
        (" OR ".join(f'"{w}"' for w in words),),
    ).fetchall()
    index, vocab = _index(docs, one_by_one)
    got = index.search(_query(vocab, words), None, n)
    assert [r for r, _ in got] == [r for r, _ in expected] or _same_up_to_ties(got, expected)
    for (_, ours), (_, theirs) in zip(got, expected, strict=True):
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-9)


def _same_up_to_ties(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Float summation order may split an exact tie differently; compare by score buckets."""

    def buckets(rows: list[tuple[int, float]]) -> list[tuple[float, frozenset[int]]]:
        out: dict[float, set[int]] = {}
        for r, s in rows:
            out.setdefault(round(s, 9), set()).add(r)
        return sorted(((s, frozenset(v)) for s, v in out.items()), reverse=True)

    return buckets(got) == buckets(expected)


def test_repository_filter_scores_as_if_only_its_documents_existed() -> None:
    docs = _docs(random.Random(7), 300)
    index, vocab = _index(docs, one_by_one=False)
    terms = _query(vocab, ["w0", "w5", "w40"])
    every = index.search(terms, None, 300)
    top = index.search(terms, None, 10)
    assert top == every[:10]
    only_s = index.search(terms, ["s"], 300)
    assert only_s and all((r - 1) % 3 == 0 for r, _ in only_s)
    # statistics (N, df, avgdl) come from the searched repository alone: the same rows and
    # scores as an index that never held the other repository's documents
    alone = lexical.LexicalIndex()
    alone.add([row for row in _rows(docs, dict(vocab)) if row.repository == "s"])
    expected = alone.search(terms, None, 300)
    assert [r for r, _ in only_s] == [r for r, _ in expected]
    assert [s for _, s in only_s] == pytest.approx([s for _, s in expected], rel=1e-12)
    assert [s for _, s in only_s] != pytest.approx([s for r, s in every if (r - 1) % 3 == 0], rel=1e-6), (
        "whole-index statistics would have given these scores"
    )
    assert index.search(terms, ["s", "r"], 300) == every
    assert index.search(terms, ["nowhere"], 10) == []
    assert index.search(terms, [], 10) == []
    # w0 is in most documents: with the common-term cut it stops being a candidate source
    assert index.search(_query(vocab, ["w0"]), None, 300, select_min_docs=len(docs)) == []
    assert index.search(_query(vocab, ["w0"]), None, 300, select_min_docs=len(docs) + 1)
    assert index.search(_query(vocab, ["w0"]), None, 300)


def test_analyzer_splits_like_unicode61_and_stems_like_porter() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    text = (
        "Café naïve sqlite3.OperationalError: database_is_locked — Running RUNS ran x86_64 déjà-vu 42 "
        "Ελληνικά άλφα русский ёлка йод हिन्दी ﬁle ＡＢＣ Ǆ Ångström Œuvre"
    )
    conn.execute("INSERT INTO t(rowid, x) VALUES(1, ?)", (text,))
    fts = [term for (term,) in conn.execute("SELECT term FROM v ORDER BY offset")]
    assert lexical.analyzer().terms(text) == fts


def test_analyzer_matches_fts5_on_the_project_docs() -> None:
    root = Path(__file__).resolve().parents[1]
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in [*docs, *sorted((root / "src").rglob("*.py"))])
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    lines = [line for line in text.splitlines() if line.strip()]
    conn.executemany("INSERT INTO t(rowid, x) VALUES(?, ?)", list(enumerate(lines, start=1)))
    fts: dict[int, list[str]] = {}
    for doc, term in conn.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
        fts.setdefault(doc, []).append(term)
    analyzer = lexical.analyzer()
    differ = [line for i, line in enumerate(lines, start=1) if analyzer.terms(line) != fts.get(i, [])]
    assert differ == []


def test_empty_document_counts_toward_the_corpus() -> None:
    analyzer = lexical.analyzer()
    tf, length = analyzer.document(("", "   ", "!!"), WEIGHTS)
    assert (tf, length) == ({}, 0)
    index = lexical.LexicalIndex()
    index.add([lexical.DocRow(1, "r", 0, lexical.pack(tf, {}))])
    assert len(index) == 1
    assert index.search([1], None, 5) == []


def test_documents_added_one_at_a_time_rank_as_a_bulk_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # several segments in the bulk load; single adds fill and freeze the tail three times
    monkeypatch.setattr(lexical, "SEGMENT_DOCS", 700)
    docs = _docs(random.Random(11), lexical.TAIL_MAX * 3 + 300)
    bulk, vocab = _index(docs, one_by_one=False)
    single, vocab2 = _index(docs, one_by_one=True)
    assert len(bulk._segments) > 3 and len(single._segments) >= 3
    mixed = lexical.LexicalIndex()
    rows = _rows(docs, vocab)
    mixed.add(rows[:10])
    mixed.add(rows[10 : 10 + lexical.TAIL_MAX + 5])  # a big batch after a tail: frozen together
    mixed.add(rows[10 + lexical.TAIL_MAX + 5 :])
    assert vocab == vocab2
    for words in (["w1"], ["w3", "w17", "error"], ["database", "locked", "w59"]):
        terms = _query(vocab, words)
        assert single.search(terms, None, 200) == bulk.search(terms, None, 200)
        assert mixed.search(terms, ["r"], 200) == bulk.search(terms, ["r"], 200)


# ---------------------------------------------------------------- in the SQLite store


def _record(memory: Memory, caller: Caller, task_id: str, observation: str) -> str:
    data = {"repository": REPO, "task_id": task_id, "action": "tried", "observation": observation}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def _vocab(db_path: Path) -> dict[str, int]:
    with sqlite3.connect(db_path) as conn:
        return dict(conn.execute("SELECT term, df FROM lex_vocab"))


def test_forget_erases_the_stems_only_it_held(memory: Memory, caller: Caller, db_path: Path) -> None:
    _record(memory, caller, "T-1", "zeppelin hangar flooded")
    gone = _record(memory, caller, "T-2", "zeppelin quixotically vanished")
    assert _vocab(db_path)["zeppelin"] == 2 and "quixot" in _vocab(db_path)
    other = SqliteStore(db_path, memory.store.dim)  # another process's view of the file
    try:
        assert len(other.lexical(["quixotically"], None, 10)) == 1
        memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": gone}))
        vocab = _vocab(db_path)
        assert "quixot" not in vocab and "vanish" not in vocab and vocab["zeppelin"] == 1
        assert other.lexical(["quixotically", "vanished"], None, 10) == []
        assert "quixot" not in other._indexes._vocab
        assert len(other.lexical(["zeppelin"], None, 10)) == 1
        assert memory.store.lexical(["quixotically"], None, 10) == []
    finally:
        other.close()


def test_writes_from_another_store_on_the_file_are_found(
    memory: Memory, caller: Caller, db_path: Path
) -> None:
    assert memory.store.lexical(["walrus"], None, 10) == []
    other = Memory.open(Settings(home=db_path.parent, db_path=db_path, embedder="hash"), HashEmbedder())
    try:
        _record(other, caller, "T-w", "a walrus chewed the ethernet cable")
    finally:
        other.close()
    assert len(memory.store.lexical(["walrus"], None, 10)) == 1
    assert memory.search(caller, parse(SearchInput, {"query": "walrus cable"})).tasks[0].task_id == "T-w"


def test_rebuild_starts_a_new_vocabulary_and_other_stores_reload(
    memory: Memory, caller: Caller, db_path: Path
) -> None:
    for i in range(5):
        _record(memory, caller, f"T-{i}", f"gearbox item{i} overheated")
    other = SqliteStore(db_path, memory.store.dim)
    try:
        before = other.lexical(["gearbox", "item3"], None, 10)
        epoch = other._indexes._lex_epoch
        assert len(before) == 5 and epoch
        memory.rebuild()
        assert other.lexical(["gearbox", "item3"], None, 10) == before
        assert other._indexes._lex_epoch not in (None, epoch)
    finally:
        other.close()


def test_a_schema_1_store_is_migrated_to_the_lexical_index(
    memory: Memory, caller: Caller, db_path: Path
) -> None:
    _record(memory, caller, "T-old", "legacy kraken tentacle stuck")
    memory.close()
    with sqlite3.connect(db_path) as conn:  # make the file look like schema 1: FTS5, no terms
        conn.execute("DROP TABLE attempt_terms")
        conn.execute("DROP TABLE thought_terms")
        conn.execute("DROP TABLE lex_vocab")
        conn.execute("CREATE VIRTUAL TABLE attempt_fts USING fts5(title, action, content='')")
        conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    store = SqliteStore(db_path, 64)
    try:
        assert len(store.lexical(["kraken"], None, 10)) == 1
        with sqlite3.connect(db_path) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert "attempt_fts" not in tables and "attempt_terms" in tables and version == str(SCHEMA_VERSION)
    finally:
        store.close()


def test_warm_loads_both_indexes_before_any_search(memory: Memory, caller: Caller, db_path: Path) -> None:
    _record(memory, caller, "T-1", "preloaded index entry")
    store = SqliteStore(db_path, memory.store.dim)
    try:
        assert (
            len(store._indexes.lexicons["attempt_terms"]) == 0 and len(store._indexes.vectors["vectors"]) == 0
        )
        store.warm()
        assert (
            len(store._indexes.lexicons["attempt_terms"]) == 1 and len(store._indexes.vectors["vectors"]) == 1
        )
        assert not store._indexes.lex_stale
    finally:
        store.close()


def test_a_forget_elsewhere_reloads_the_vector_index_too(
    memory: Memory, caller: Caller, db_path: Path
) -> None:
    keep = _record(memory, caller, "T-1", "albatross nest in the server room")
    gone = _record(memory, caller, "T-2", "albatross feathers in the fan")
    query = memory.ctx.embed(["albatross"])[0]
    assert len(memory.store.vector(query, None, 10)) == 2
    other = Memory.open(Settings(home=db_path.parent, db_path=db_path, embedder="hash"), HashEmbedder())
    try:
        other.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": gone}))
    finally:
        other.close()
    assert len(memory.store.vector(query, None, 10)) == 1
    hits = memory.search(caller, parse(SearchInput, {"query": "albatross"})).tasks
    assert [t.task_id for t in hits] == ["T-1"] and hits[0].matched_attempt_ids == [keep]


def test_a_forget_drops_rows_in_place_with_the_scores_of_a_fresh_load(
    memory: Memory, caller: Caller, db_path: Path
) -> None:
    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    ids = [_record(memory, caller, f"T-{i}", " ".join(rng.choices(words, k=12))) for i in range(60)]
    other = SqliteStore(db_path, memory.store.dim)  # another process's view, indexes loaded
    try:
        query = ["w1", "w2", "w3", "w30"]
        vec = memory.embedder.embed(["w1 w2 w3"])[0]
        assert other.lexical(query, None, 100) and other.vector(vec, None, 100)
        reloads = other.reloads
        for gone in ids[::7]:
            memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": gone}))
        lexical_after = other.lexical(query, None, 100)
        vector_after = other.vector(vec, None, 100)
        assert other.reloads == reloads, "a forget must not make other processes reload their indexes"
        fresh = SqliteStore(db_path, memory.store.dim)
        try:
            want_lexical = fresh.lexical(query, None, 100)
            assert [r for r, _ in lexical_after] == [r for r, _ in want_lexical]
            assert [s for _, s in lexical_after] == pytest.approx([s for _, s in want_lexical], rel=1e-9)
            assert vector_after == fresh.vector(vec, None, 100)
        finally:
            fresh.close()
        live = set(other.attempt_keys([r for r, _ in lexical_after + vector_after]))
        assert live == {r for r, _ in lexical_after + vector_after}, "a forgotten row was returned"
    finally:
        other.close()
