"""The SQLite file's thought tables (index, labels, edges, vectors, rejection fingerprints) and
their recall views; the code that writes and reads them is :mod:`mentis.store.shared.thoughts`."""

from __future__ import annotations

THOUGHT_SCHEMA = """
CREATE TABLE IF NOT EXISTS thought_idx(
    rowid INTEGER PRIMARY KEY, thought_id TEXT NOT NULL UNIQUE, repository TEXT NOT NULL,
    type TEXT NOT NULL, role TEXT NOT NULL, agent_id TEXT NOT NULL, task_id TEXT,
    created_at TEXT NOT NULL, importance REAL NOT NULL, confidence REAL, scope TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS thought_repo_time ON thought_idx(repository, created_at);
CREATE TABLE IF NOT EXISTS thought_label(rowid INTEGER NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL);
DROP INDEX IF EXISTS thought_label_idx;
CREATE INDEX IF NOT EXISTS thought_label_cover ON thought_label(kind, label, rowid);
CREATE INDEX IF NOT EXISTS thought_label_row ON thought_label(rowid);
CREATE TABLE IF NOT EXISTS thought_edge(
    from_rowid INTEGER NOT NULL, from_id TEXT NOT NULL, kind TEXT NOT NULL, to_id TEXT NOT NULL,
    valid_at TEXT, invalid_at TEXT, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS thought_edge_to ON thought_edge(to_id);
CREATE INDEX IF NOT EXISTS thought_edge_from ON thought_edge(from_id);
CREATE TABLE IF NOT EXISTS thought_vectors(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, vec BLOB NOT NULL, chk INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS thought_vectors_repository ON thought_vectors(repository);
CREATE TABLE IF NOT EXISTS rejections(
    id INTEGER PRIMARY KEY, by_rowid INTEGER NOT NULL, by_id TEXT NOT NULL, repository TEXT NOT NULL,
    target_id TEXT NOT NULL, target_kind TEXT NOT NULL, at TEXT NOT NULL, norm_hash TEXT NOT NULL,
    vec BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS rejections_repo ON rejections(repository);
CREATE INDEX IF NOT EXISTS rejections_hash ON rejections(norm_hash);
"""
THOUGHT_TABLES = (
    "thought_idx",
    "thought_label",
    "thought_edge",
    "thought_vectors",
    "rejections",
)


THOUGHT_VIEWS = """
CREATE TEMP VIEW thoughts AS
SELECT json_extract(b.body, '$.thought_id') AS thought_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.type') AS type,
       json_extract(b.body, '$.role') AS role,
       json_extract(b.body, '$.content') AS content,
       CAST(json_extract(b.body, '$.importance') AS REAL) AS importance,
       CAST(json_extract(b.body, '$.confidence') AS REAL) AS confidence,
       json_extract(b.body, '$.created_at') AS created_at,
       json_extract(b.body, '$.agent_id') AS agent_id,
       json_extract(b.body, '$.task_id') AS task_id,
       json(json_extract(b.body, '$.tags')) AS tags,
       json(json_extract(b.body, '$.concepts')) AS concepts,
       json_extract(b.body, '$.entity_type') AS entity_type,
       json_extract(b.body, '$.source_episode.session_id') AS source_session,
       json(json_extract(b.body, '$.source_episode')) AS source_episode
FROM main.thought_idx t JOIN checked_bodies b ON b.rowid = t.rowid
WHERE mentis_visible(t.scope) LIMIT -1;

CREATE TEMP VIEW relations AS
SELECT json_extract(b.body, '$.thought_id') AS from_id,
       json_extract(r.value, '$.kind') AS kind,
       json_extract(r.value, '$.target_id') AS to_id,
       json_extract(r.value, '$.valid_at') AS valid_at,
       json_extract(r.value, '$.invalid_at') AS invalid_at
FROM main.thought_idx t JOIN checked_bodies b ON b.rowid = t.rowid, json_each(b.body, '$.relations') r
WHERE mentis_visible(t.scope) LIMIT -1;
"""
