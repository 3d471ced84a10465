"""The SQLite file's ledger and derived attempt tables (thought and lexicon tables sit with their code
in :mod:`~mentis.store.sqlite.thought_schema` and :mod:`~mentis.store.sqlite.indexes`). Rebuild
clears every table in ``_DERIVED_TABLES`` and derives them again from the ledger.
"""

from __future__ import annotations

from mentis.store.shared.entity_types import ENTITY_TYPES_SCHEMA
from mentis.store.sqlite.indexes import TERM_TABLES
from mentis.store.sqlite.indexes import new_epoch as _new_epoch
from mentis.store.sqlite.thought_schema import THOUGHT_TABLES

_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
    rowid INTEGER PRIMARY KEY,
    v INTEGER NOT NULL, chain TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    id TEXT NOT NULL, at TEXT NOT NULL, agent TEXT NOT NULL, prev TEXT NOT NULL,
    body_hash TEXT NOT NULL, key_id TEXT, sig TEXT, hash TEXT NOT NULL,
    UNIQUE(chain, seq));
CREATE TABLE IF NOT EXISTS bodies(rowid INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS heads(chain TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entry_ids(
    id TEXT PRIMARY KEY, chain TEXT NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_branching ON entries(kind) WHERE kind IN ('fork', 'branch', 'merge');
"""

_DERIVED_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS attempt_idx(
    rowid INTEGER PRIMARY KEY, attempt_id TEXT NOT NULL UNIQUE, repository TEXT NOT NULL,
    task_id TEXT NOT NULL, status TEXT NOT NULL, scope TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS attempt_task ON attempt_idx(repository, task_id);
CREATE INDEX IF NOT EXISTS attempt_status ON attempt_idx(repository, status, task_id);
CREATE INDEX IF NOT EXISTS entries_agent ON entries(chain, kind, agent);
CREATE TABLE IF NOT EXISTS scope_keys(scope TEXT PRIMARY KEY, repository TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS scope_keys_repository ON scope_keys(repository);
CREATE TABLE IF NOT EXISTS correction_idx(rowid INTEGER PRIMARY KEY, attempt_rowid INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS correction_attempt ON correction_idx(attempt_rowid);
CREATE TABLE IF NOT EXISTS task_idx(
    repository TEXT NOT NULL, task_id TEXT NOT NULL, title_rowid INTEGER,
    PRIMARY KEY(repository, task_id));
CREATE TABLE IF NOT EXISTS forgotten(
    attempt_id TEXT PRIMARY KEY, repository TEXT NOT NULL, tomb_rowid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS attempt_label(rowid INTEGER NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL);
DROP INDEX IF EXISTS attempt_label_idx;
CREATE INDEX IF NOT EXISTS attempt_label_cover ON attempt_label(kind, label, rowid);
CREATE INDEX IF NOT EXISTS attempt_label_row ON attempt_label(rowid);
CREATE TABLE IF NOT EXISTS vectors(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, vec BLOB NOT NULL, chk INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS vectors_repository ON vectors(repository);
CREATE TABLE IF NOT EXISTS sig_streams(
    stream TEXT PRIMARY KEY, n INTEGER NOT NULL, digest TEXT NOT NULL, key_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS skill_idx(
    repository TEXT NOT NULL, skill_id TEXT NOT NULL, rowid INTEGER NOT NULL UNIQUE, status TEXT NOT NULL,
    version INTEGER NOT NULL, content_hash TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
    tags TEXT NOT NULL, triggers TEXT NOT NULL, PRIMARY KEY(repository, skill_id));
CREATE TABLE IF NOT EXISTS skill_version_idx(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, skill_id TEXT NOT NULL, version INTEGER NOT NULL,
    content_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS skill_version_skill ON skill_version_idx(repository, skill_id, version);
CREATE TABLE IF NOT EXISTS skill_revoked(
    status_rowid INTEGER NOT NULL, repository TEXT NOT NULL, skill_id TEXT NOT NULL,
    content_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS skill_revoked_hash ON skill_revoked(content_hash);
CREATE INDEX IF NOT EXISTS skill_revoked_skill ON skill_revoked(repository, skill_id);
CREATE TABLE IF NOT EXISTS skill_vectors(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, vec BLOB NOT NULL, chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS skill_instructions(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, skill_id TEXT NOT NULL,
    instructions_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS skill_instructions_hash ON skill_instructions(instructions_hash, repository);
CREATE TABLE IF NOT EXISTS skill_revoked_instructions(
    status_rowid INTEGER NOT NULL, repository TEXT NOT NULL, skill_id TEXT NOT NULL,
    instructions_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS skill_revoked_instructions_hash
    ON skill_revoked_instructions(instructions_hash, repository);
"""
    + ENTITY_TYPES_SCHEMA
)
"""Skills (:mod:`mentis.store.shared.skills`) have ``skill_idx``, ``skill_version_idx``, ``skill_revoked``,
``skill_vectors``, ``skill_instructions`` and ``skill_revoked_instructions`` here; their lexical
rows, ``skill_terms``, sit with the other lexical tables; ``entity_types`` is the entity-type
registry's (:mod:`mentis.store.shared.entity_types`)."""
_DERIVED_TABLES = (
    "attempt_idx",
    "scope_keys",
    "correction_idx",
    "task_idx",
    "forgotten",
    "vectors",
    "attempt_label",
    "skill_idx",
    "skill_version_idx",
    "skill_revoked",
    "skill_vectors",
    "skill_instructions",
    "skill_revoked_instructions",
    "entity_types",
    *THOUGHT_TABLES,
    *TERM_TABLES,
    "lex_vocab",
    "removed_rows",
)


__all__ = ["_DERIVED_SCHEMA", "_DERIVED_TABLES", "_LEDGER_SCHEMA", "_new_epoch"]
