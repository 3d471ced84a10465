"""The PostgreSQL store's schema as numbered migrations, applied on open (one transaction each, under
an advisory lock so two processes opening a fresh database do not race).

Tables mirror the SQLite store's (:mod:`mentis.store.sqlite.store`): the ledger (``entries``,
``bodies``, ``heads``) and derived tables rebuilt from it. Schema 1 searched words with a
``tsvector`` per record (``ts_rank``); schema 2 replaces it with the analysed term rows of
:mod:`~mentis.store.postgres.lexicon` (BM25 as on SQLite) and indexes every live record while
migrating. Vectors are pgvector columns with HNSW (cosine) indexes. Schema 3 adds the ``tokens``
table (``store/tokens.py``): credentials kept outside the ledger, which the recall role cannot
read. Schema 4 adds the skill tables (:mod:`~mentis.store.shared.skills`); no ledger before it
holds a skill, so they start empty. Schema 5 adds ``sig_streams``, each signing stream's last
statement (derived from the ledger, rebuilt with it). Schema 6 adds ``title_terms`` (each attempt's
task title alone) and indexes the titles of the live attempts while migrating. Schema 7 rebuilds
the attempts' HNSW index over ``vec::halfvec(dim)`` (:mod:`~mentis.store.postgres.vectors`; the
column keeps float32): the build reads every vector, so it takes as long as a fresh index on that
many rows. Schema 8 adds ``window_terms`` (each thought of a session with the thought before it)
and indexes the live thoughts' windows while migrating. Schema 9 adds ``entry_ids`` (every ledger
entry's id, claimed by each append inside its transaction, so no id is written twice) and fills it
from the ledger while migrating. Schema 10 adds ``skill_instructions`` and
``skill_revoked_instructions`` (revocations keyed on a skill's instructions) and fills them from
the checked skill bodies while migrating, revoking the copies they catch as a rebuild would. Schema
11 adds ``chk``, a checksum, to every vector, lexical and vocabulary row (``derived_check``; the
tables earlier migrations create carry it from the start) and computes it for the rows already
there. Schema 12 adds ``proposals``, the review queue of proposed memories (outside the ledger).
Schema 13 adds ``webhooks`` and ``webhook_outbox`` (:mod:`~mentis.store.shared.webhooks`):
subscriptions and the deliveries each append writes in its own transaction; configuration, outside
the ledger, which the recall role cannot read. Schema 14 adds each attempt's and thought's scope
key (private scopes) and ``scope_keys``, and has the recall views admit rows by scope key. Schema
15 adds ``entity_types`` (the entity-type registry) and the ``thoughts`` view's provenance columns.

``recall`` SQL reads the schema ``mentis_recall``: five views (the documented ones) that parse
every value out of a body checked against its entry's ``body_hash`` and keep only rows whose
repository ``mentis_visible`` — a SECURITY DEFINER function reading the caller's repositories from
``recall_scope`` for this backend — admits. The role ``mentis_recall`` may read those views and
nothing else; recall statements run under it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mentis.ledger.bodies import status_sql
from mentis.store.shared.derived_check import PG_VECTOR_CHECK, TERMS, VECTORS, terms_check, vocab_check
from mentis.store.shared.entity_types import ENTITY_TYPES_SCHEMA
from mentis.store.shared.proposals import PROPOSALS_SCHEMA
from mentis.store.shared.tokens import POSTGRES_TOKEN_TABLE
from mentis.store.shared.webhooks import POSTGRES_WEBHOOK_SCHEMA

SIG_STREAMS_SQL = (
    "CREATE TABLE IF NOT EXISTS sig_streams("
    "stream text PRIMARY KEY, n bigint NOT NULL, digest text NOT NULL, key_id text NOT NULL)"
)
"""Derived from the ledger (:mod:`mentis.store.shared.agents`): each signing stream's last statement."""

SCHEMA_VERSION = 16
SIGNING_VERSION = 5
"""The migration that adds ``sig_streams`` (signed writes; version 4 is the skill registry's)."""
LEXICON_VERSION = 2
"""The migration that adds the lexical tables; the store indexes every live record after it."""
TITLES_VERSION = 6
"""The migration that adds ``title_terms``; the store indexes every live attempt's title after it."""
HALFVEC_VERSION = 7
"""The migration that rebuilds ``vectors``' HNSW index over half-precision vectors."""
WINDOWS_VERSION = 8
"""The migration that adds ``window_terms``; the store indexes every live thought's window after it."""
ENTRY_IDS_VERSION = 9
"""The migration that adds ``entry_ids``; the store fills it from the ledger after it."""
ENTRY_IDS_SQL = (
    "CREATE TABLE IF NOT EXISTS entry_ids(id text PRIMARY KEY, chain text NOT NULL, seq bigint NOT NULL)"
)
"""Every ledger entry's id with the entry that had it first (:mod:`mentis.store.shared.entry_ids`)."""
INSTRUCTIONS_VERSION = 10
"""The migration that adds the skill instruction tables; the store fills them after it."""
CHECKS_VERSION = 11
"""The migration that adds ``chk`` to the vector, lexical and vocabulary rows; the store computes
every existing row's checksum after it (``derived_check``)."""
PROPOSALS_VERSION = 12
"""The migration that adds ``proposals``, the review queue (:mod:`mentis.store.shared.proposals`)."""
WEBHOOKS_VERSION = 13
"""The migration that adds the webhook subscriptions and their outbox (outside the ledger)."""
BRANCHES_VERSION = 16
"""The migration that adds ``entries_branching``, a partial index of the ledger's fork, branch
and merge entries (branch chains, :mod:`mentis.ledger.branches`)."""
BRANCHES_SQL = (
    "CREATE INDEX IF NOT EXISTS entries_branching ON entries(kind) WHERE kind IN ('fork', 'branch', 'merge')"
)
SCOPES_VERSION = 14
"""The migration that adds each attempt's and thought's scope key (private scopes, issue 26) and
has the recall views admit rows by it; ``scope_keys`` lists every key a record was written or
published under (a search and ``recall`` enumerate keys from it, never from the record tables)."""
SCOPES_SQL = (
    """
ALTER TABLE attempt_idx ADD COLUMN IF NOT EXISTS scope text;
UPDATE attempt_idx SET scope = repository WHERE scope IS NULL;
ALTER TABLE attempt_idx ALTER COLUMN scope SET NOT NULL;
ALTER TABLE thought_idx ADD COLUMN IF NOT EXISTS scope text;
UPDATE thought_idx SET scope = repository WHERE scope IS NULL;
ALTER TABLE thought_idx ALTER COLUMN scope SET NOT NULL;
CREATE TABLE IF NOT EXISTS scope_keys(scope text PRIMARY KEY, repository text NOT NULL);
CREATE INDEX IF NOT EXISTS scope_keys_repository ON scope_keys(repository);
INSERT INTO scope_keys(scope, repository)
    SELECT DISTINCT scope, repository FROM attempt_idx
    UNION SELECT DISTINCT scope, repository FROM thought_idx
    ON CONFLICT (scope) DO NOTHING;
"""
    + """CREATE OR REPLACE VIEW mentis_recall.attempts WITH (security_barrier) AS
SELECT j->>'attempt_id' AS attempt_id,
       j->>'repository' AS repository,
       j->>'task_id' AS task_id,
       j->>'task_title' AS task_title,
       j->>'agent_id' AS agent_id,
       j->>'session_id' AS session_id,
       j->>'created_at' AS created_at,
       {attempt_status} AS status,
       j->>'action' AS action,
       j->>'observation' AS observation,
       j->>'inference' AS inference,
       (j->'files')::text AS files,
       (j->'tags')::text AS tags,
       j->'code_context'->>'commit' AS "commit",
       j->'code_context'->>'branch' AS branch,
       ((j->'code_context'->>'dirty')::boolean)::int AS dirty,
       j->'check'->>'command' AS check_command,
       (j->'check'->>'exit_code')::bigint AS check_exit_code,
       j->'check'->>'output' AS check_output,
       EXISTS(SELECT 1 FROM correction_idx c WHERE c.attempt_rowid = a.rowid)::int AS outdated
FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid JOIN entries e ON e.rowid = a.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(a.scope);

CREATE OR REPLACE VIEW mentis_recall.corrections WITH (security_barrier) AS
SELECT j->>'attempt_id' AS attempt_id,
       j->>'repository' AS repository,
       j->>'reason' AS reason,
       j->>'latest_commit' AS latest_commit,
       j->>'at' AS at,
       j->>'agent_id' AS agent_id
FROM correction_idx c JOIN bodies b ON b.rowid = c.rowid JOIN entries e ON e.rowid = c.rowid
     JOIN attempt_idx a ON a.rowid = c.attempt_rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(a.scope);

CREATE OR REPLACE VIEW mentis_recall.tasks WITH (security_barrier) AS
SELECT t.repository AS repository, t.task_id AS task_id,
       (SELECT aj->>'task_title' FROM attempt_idx a JOIN bodies ab ON ab.rowid = a.rowid
          JOIN entries ae ON ae.rowid = a.rowid, LATERAL mentis_checked_body(ab.body, ae.body_hash) aj
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope)
           AND aj->>'task_title' IS NOT NULL ORDER BY a.rowid DESC LIMIT 1) AS title,
       (SELECT min(aj->>'created_at') FROM attempt_idx a JOIN bodies ab ON ab.rowid = a.rowid
          JOIN entries ae ON ae.rowid = a.rowid, LATERAL mentis_checked_body(ab.body, ae.body_hash) aj
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope))
         AS created_at,
       (SELECT count(*) FROM attempt_idx a
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope))
         AS attempt_count
FROM task_idx t
WHERE EXISTS(SELECT 1 FROM attempt_idx a
              WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope));

DROP VIEW IF EXISTS mentis_recall.thoughts;
CREATE OR REPLACE VIEW mentis_recall.thoughts WITH (security_barrier) AS
SELECT j->>'thought_id' AS thought_id,
       j->>'repository' AS repository,
       j->>'type' AS type,
       j->>'role' AS role,
       j->>'content' AS content,
       (j->>'importance')::double precision AS importance,
       (j->>'confidence')::double precision AS confidence,
       j->>'created_at' AS created_at,
       j->>'agent_id' AS agent_id,
       j->>'task_id' AS task_id,
       (j->'tags')::text AS tags,
       (j->'concepts')::text AS concepts
FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(t.scope);

CREATE OR REPLACE VIEW mentis_recall.relations WITH (security_barrier) AS
SELECT j->>'thought_id' AS from_id,
       r->>'kind' AS kind,
       r->>'target_id' AS to_id,
       r->>'valid_at' AS valid_at,
       r->>'invalid_at' AS invalid_at
FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j,
     LATERAL json_array_elements(coalesce(j->'relations', '[]'::json)) r
WHERE mentis_visible(t.scope);

"""
    + "GRANT SELECT ON ALL TABLES IN SCHEMA mentis_recall TO mentis_recall;\n"
).replace("{attempt_status}", status_sql("j->'check'->>'status'"))
"""Every record written before it is its repository's, so its key is the repository. The views
are replaced (same columns): each admits a row by its scope key (``mentis_visible``), and a task
shows, counts and titles only the attempts the caller reads."""

ENTITY_TYPES_VERSION = 15
"""The migration that adds ``entity_types`` (the entity-type registry, derived from its system
chain; no older ledger holds one, so it starts empty) and the recall view ``thoughts``'s
provenance columns (issue 27)."""
ENTITY_TYPES_SQL = (
    ENTITY_TYPES_SCHEMA
    + """
CREATE OR REPLACE VIEW mentis_recall.thoughts WITH (security_barrier) AS
SELECT j->>'thought_id' AS thought_id,
       j->>'repository' AS repository,
       j->>'type' AS type,
       j->>'role' AS role,
       j->>'content' AS content,
       (j->>'importance')::double precision AS importance,
       (j->>'confidence')::double precision AS confidence,
       j->>'created_at' AS created_at,
       j->>'agent_id' AS agent_id,
       j->>'task_id' AS task_id,
       (j->'tags')::text AS tags,
       (j->'concepts')::text AS concepts,
       j->>'entity_type' AS entity_type,
       j->'source_episode'->>'session_id' AS source_session,
       (j->'source_episode')::text AS source_episode
FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(t.scope);
GRANT SELECT ON ALL TABLES IN SCHEMA mentis_recall TO mentis_recall;
"""
)
"""Schema 15: the view's columns as before, then ``entity_type``, ``source_session`` and
``source_episode`` (JSON text) at the end (``CREATE OR REPLACE VIEW`` may only add columns there).
Schema 14 drops the view before it creates it again, so a store whose recorded version is set
back (the upgrade tests do that) replays 14 over 15's wider view without refusing to narrow it."""
RECALL_SCHEMA = "mentis_recall"
RECALL_ROLE = "mentis_recall"

DERIVED_TABLES = (
    "attempt_idx",
    "scope_keys",
    "correction_idx",
    "task_idx",
    "forgotten",
    "attempt_terms",
    "attempt_label",
    "vectors",
    "thought_idx",
    "thought_label",
    "thought_edge",
    "thought_terms",
    "lex_vocab",
    "lex_removed",
    "thought_vectors",
    "rejections",
    "skill_idx",
    "skill_version_idx",
    "skill_revoked",
    "skill_terms",
    "skill_vectors",
    "title_terms",
    "window_terms",
    "skill_instructions",
    "skill_revoked_instructions",
    "entity_types",
)

_V1 = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS meta(key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE entries(
    rowid bigserial PRIMARY KEY,
    v integer NOT NULL, chain text NOT NULL, seq bigint NOT NULL, kind text NOT NULL,
    id text NOT NULL, at text NOT NULL, agent text NOT NULL, prev text NOT NULL,
    body_hash text NOT NULL, key_id text, sig text, hash text NOT NULL,
    UNIQUE(chain, seq));
CREATE INDEX entries_hash ON entries(hash);
CREATE TABLE bodies(rowid bigint PRIMARY KEY, body bytea NOT NULL);
CREATE TABLE heads(chain text PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL);

CREATE TABLE attempt_idx(
    rowid bigint PRIMARY KEY, attempt_id text NOT NULL UNIQUE, repository text NOT NULL,
    task_id text NOT NULL, status text NOT NULL);
CREATE INDEX attempt_task ON attempt_idx(repository, task_id);
CREATE TABLE correction_idx(rowid bigint PRIMARY KEY, attempt_rowid bigint NOT NULL);
CREATE INDEX correction_attempt ON correction_idx(attempt_rowid);
CREATE TABLE task_idx(
    repository text NOT NULL, task_id text NOT NULL, title_rowid bigint, PRIMARY KEY(repository, task_id));
CREATE TABLE forgotten(attempt_id text PRIMARY KEY, repository text NOT NULL, tomb_rowid bigint NOT NULL);
CREATE TABLE attempt_fts(rowid bigint PRIMARY KEY, repository text NOT NULL, tsv tsvector NOT NULL);
CREATE INDEX attempt_fts_gin ON attempt_fts USING gin(tsv);
CREATE TABLE attempt_label(rowid bigint NOT NULL, kind text NOT NULL, label text NOT NULL);
CREATE INDEX attempt_label_idx ON attempt_label(kind, label);
CREATE INDEX attempt_label_row ON attempt_label(rowid);
CREATE TABLE vectors(
    rowid bigint PRIMARY KEY, repository text NOT NULL, vec vector({dim}) NOT NULL,
    chk bigint NOT NULL DEFAULT 0);
CREATE INDEX vectors_hnsw ON vectors USING hnsw (vec vector_cosine_ops);
CREATE INDEX vectors_repo ON vectors(repository);

CREATE TABLE thought_idx(
    rowid bigint PRIMARY KEY, thought_id text NOT NULL UNIQUE, repository text NOT NULL,
    type text NOT NULL, role text NOT NULL, agent_id text NOT NULL, task_id text,
    created_at text NOT NULL, importance double precision NOT NULL, confidence double precision);
CREATE INDEX thought_repo_time ON thought_idx(repository, created_at);
CREATE TABLE thought_label(rowid bigint NOT NULL, kind text NOT NULL, label text NOT NULL);
CREATE INDEX thought_label_idx ON thought_label(kind, label);
CREATE INDEX thought_label_row ON thought_label(rowid);
CREATE TABLE thought_edge(
    from_rowid bigint NOT NULL, from_id text NOT NULL, kind text NOT NULL, to_id text NOT NULL,
    valid_at text, invalid_at text, created_at text NOT NULL);
CREATE INDEX thought_edge_to ON thought_edge(to_id);
CREATE INDEX thought_edge_from ON thought_edge(from_id);
CREATE TABLE thought_fts(rowid bigint PRIMARY KEY, repository text NOT NULL, tsv tsvector NOT NULL);
CREATE INDEX thought_fts_gin ON thought_fts USING gin(tsv);
CREATE TABLE thought_vectors(
    rowid bigint PRIMARY KEY, repository text NOT NULL, vec vector({dim}) NOT NULL,
    chk bigint NOT NULL DEFAULT 0);
CREATE INDEX thought_vectors_hnsw ON thought_vectors USING hnsw (vec vector_cosine_ops);
CREATE TABLE rejections(
    id bigserial PRIMARY KEY, by_rowid bigint NOT NULL, by_id text NOT NULL, repository text NOT NULL,
    target_id text NOT NULL, target_kind text NOT NULL, at text NOT NULL, norm_hash text NOT NULL,
    vec bytea NOT NULL);
CREATE INDEX rejections_repo ON rejections(repository);

CREATE UNLOGGED TABLE recall_scope(pid integer PRIMARY KEY, repositories text[] NOT NULL);

CREATE FUNCTION mentis_checked_body(body bytea, body_hash text) RETURNS json
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog AS $f$
BEGIN
    IF encode(sha256(body), 'hex') <> body_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'MT001',
            MESSAGE = 'a body no longer matches its ledger hash; run `mentis verify`';
    END IF;
    RETURN convert_from(body, 'UTF8')::json;
END $f$;

CREATE FUNCTION mentis_visible(repo text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_catalog AS $f$
    SELECT coalesce(
        (SELECT repo = ANY(s.repositories) FROM recall_scope s WHERE s.pid = pg_backend_pid()), false)
$f$;

DO $d$ BEGIN
    CREATE ROLE mentis_recall NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $d$;
GRANT mentis_recall TO CURRENT_USER;
CREATE SCHEMA mentis_recall;
REVOKE ALL ON SCHEMA mentis_recall FROM PUBLIC;
GRANT USAGE ON SCHEMA mentis_recall TO mentis_recall;

CREATE VIEW mentis_recall.attempts WITH (security_barrier) AS
SELECT j->>'attempt_id' AS attempt_id,
       j->>'repository' AS repository,
       j->>'task_id' AS task_id,
       j->>'task_title' AS task_title,
       j->>'agent_id' AS agent_id,
       j->>'session_id' AS session_id,
       j->>'created_at' AS created_at,
       {attempt_status} AS status,
       j->>'action' AS action,
       j->>'observation' AS observation,
       j->>'inference' AS inference,
       (j->'files')::text AS files,
       (j->'tags')::text AS tags,
       j->'code_context'->>'commit' AS "commit",
       j->'code_context'->>'branch' AS branch,
       ((j->'code_context'->>'dirty')::boolean)::int AS dirty,
       j->'check'->>'command' AS check_command,
       (j->'check'->>'exit_code')::bigint AS check_exit_code,
       j->'check'->>'output' AS check_output,
       EXISTS(SELECT 1 FROM correction_idx c WHERE c.attempt_rowid = a.rowid)::int AS outdated
FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid JOIN entries e ON e.rowid = a.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(a.repository);

CREATE VIEW mentis_recall.corrections WITH (security_barrier) AS
SELECT j->>'attempt_id' AS attempt_id,
       j->>'repository' AS repository,
       j->>'reason' AS reason,
       j->>'latest_commit' AS latest_commit,
       j->>'at' AS at,
       j->>'agent_id' AS agent_id
FROM correction_idx c JOIN bodies b ON b.rowid = c.rowid JOIN entries e ON e.rowid = c.rowid
     JOIN attempt_idx a ON a.rowid = c.attempt_rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(a.repository);

CREATE VIEW mentis_recall.tasks WITH (security_barrier) AS
SELECT t.repository AS repository, t.task_id AS task_id,
       tj->>'task_title' AS title,
       (SELECT min(aj->>'created_at') FROM attempt_idx a JOIN bodies ab ON ab.rowid = a.rowid
          JOIN entries ae ON ae.rowid = a.rowid, LATERAL mentis_checked_body(ab.body, ae.body_hash) aj
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS created_at,
       (SELECT count(*) FROM attempt_idx a
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS attempt_count
FROM task_idx t LEFT JOIN bodies tb ON tb.rowid = t.title_rowid
     LEFT JOIN entries te ON te.rowid = t.title_rowid
     LEFT JOIN LATERAL mentis_checked_body(tb.body, te.body_hash) tj ON true
WHERE mentis_visible(t.repository);

CREATE VIEW mentis_recall.thoughts WITH (security_barrier) AS
SELECT j->>'thought_id' AS thought_id,
       j->>'repository' AS repository,
       j->>'type' AS type,
       j->>'role' AS role,
       j->>'content' AS content,
       (j->>'importance')::double precision AS importance,
       (j->>'confidence')::double precision AS confidence,
       j->>'created_at' AS created_at,
       j->>'agent_id' AS agent_id,
       j->>'task_id' AS task_id,
       (j->'tags')::text AS tags,
       (j->'concepts')::text AS concepts
FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j
WHERE mentis_visible(t.repository);

CREATE VIEW mentis_recall.relations WITH (security_barrier) AS
SELECT j->>'thought_id' AS from_id,
       r->>'kind' AS kind,
       r->>'target_id' AS to_id,
       r->>'valid_at' AS valid_at,
       r->>'invalid_at' AS invalid_at
FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid,
     LATERAL mentis_checked_body(b.body, e.body_hash) j,
     LATERAL json_array_elements(coalesce(j->'relations', '[]'::json)) r
WHERE mentis_visible(t.repository);

GRANT SELECT ON ALL TABLES IN SCHEMA mentis_recall TO mentis_recall;
""".replace("{attempt_status}", status_sql("j->'check'->>'status'"))

LEXICON_SQL = """
CREATE TABLE lex_vocab(
    id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, repository text NOT NULL,
    term text NOT NULL, df integer NOT NULL, UNIQUE(repository, term), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX lex_vocab_term ON lex_vocab(term);
CREATE TABLE attempt_terms(
    rowid bigint PRIMARY KEY, repository text NOT NULL, len integer NOT NULL, terms bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX attempt_terms_xid ON attempt_terms(xid);
CREATE TABLE thought_terms(
    rowid bigint PRIMARY KEY, repository text NOT NULL, len integer NOT NULL, terms bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX thought_terms_xid ON thought_terms(xid);
CREATE TABLE lex_removed(
    id bigserial PRIMARY KEY, kind text NOT NULL, row bigint NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id());
CREATE INDEX lex_removed_xid ON lex_removed(xid);
DROP TABLE attempt_fts;
DROP TABLE thought_fts;
"""
"""Schema 2: the lexical tables (:mod:`mentis.store.postgres.lexicon`) replace schema 1's
``tsvector`` tables."""

TITLES_SQL = """
CREATE TABLE IF NOT EXISTS title_terms(
    rowid bigint PRIMARY KEY, repository text NOT NULL, len integer NOT NULL, terms bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS title_terms_xid ON title_terms(xid);
"""
"""Schema 6: each attempt's task title alone (the title-to-title signal of ``search``); the
store indexes the live attempts' titles after it, from bodies checked against their entries."""

WINDOWS_SQL = """
CREATE TABLE IF NOT EXISTS window_terms(
    rowid bigint PRIMARY KEY, repository text NOT NULL, len integer NOT NULL, terms bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS window_terms_xid ON window_terms(xid);
"""
"""Schema 8: each thought of a session with the thought before it (the causal windows of
``search_thoughts``); the store indexes the live thoughts' windows after it, from checked bodies."""

_V4_SKILLS = """
CREATE TABLE IF NOT EXISTS skill_idx(
    repository text NOT NULL, skill_id text NOT NULL, rowid bigint NOT NULL UNIQUE, status text NOT NULL,
    version integer NOT NULL, content_hash text NOT NULL, name text NOT NULL, description text NOT NULL,
    tags text NOT NULL, triggers text NOT NULL, PRIMARY KEY(repository, skill_id));
CREATE TABLE IF NOT EXISTS skill_version_idx(
    rowid bigint PRIMARY KEY, repository text NOT NULL, skill_id text NOT NULL, version integer NOT NULL,
    content_hash text NOT NULL);
CREATE INDEX IF NOT EXISTS skill_version_skill ON skill_version_idx(repository, skill_id, version);
CREATE TABLE IF NOT EXISTS skill_revoked(
    status_rowid bigint NOT NULL, repository text NOT NULL, skill_id text NOT NULL,
    content_hash text NOT NULL);
CREATE INDEX IF NOT EXISTS skill_revoked_hash ON skill_revoked(content_hash);
CREATE INDEX IF NOT EXISTS skill_revoked_skill ON skill_revoked(repository, skill_id);
CREATE TABLE IF NOT EXISTS skill_terms(
    rowid bigint PRIMARY KEY, repository text NOT NULL, len integer NOT NULL, terms bytea NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(), chk bigint NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS skill_terms_xid ON skill_terms(xid);
CREATE TABLE IF NOT EXISTS skill_vectors(
    rowid bigint PRIMARY KEY, repository text NOT NULL, vec vector({dim}) NOT NULL,
    chk bigint NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS skill_vectors_hnsw ON skill_vectors USING hnsw (vec vector_cosine_ops);
"""
"""Schema 4: the skill registry's derived tables (:mod:`mentis.store.shared.skills`)."""

INSTRUCTIONS_SQL = """
CREATE TABLE IF NOT EXISTS skill_instructions(
    rowid bigint PRIMARY KEY, repository text NOT NULL, skill_id text NOT NULL,
    instructions_hash text NOT NULL);
CREATE INDEX IF NOT EXISTS skill_instructions_hash ON skill_instructions(instructions_hash, repository);
CREATE TABLE IF NOT EXISTS skill_revoked_instructions(
    status_rowid bigint NOT NULL, repository text NOT NULL, skill_id text NOT NULL,
    instructions_hash text NOT NULL);
CREATE INDEX IF NOT EXISTS skill_revoked_instructions_hash
    ON skill_revoked_instructions(instructions_hash, repository);
"""
"""Schema 10: revocations keyed on a skill's instructions (:mod:`mentis.store.shared.skills`)."""

HALFVEC_SQL = """
DROP INDEX IF EXISTS vectors_hnsw;
CREATE INDEX vectors_hnsw ON vectors USING hnsw ((vec::halfvec({dim})) halfvec_cosine_ops);
"""
"""Schema 7: ``vectors.hnsw_index("vectors", dim)``, over the rows already there."""

CHECKS_SQL = "".join(
    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS chk bigint NOT NULL DEFAULT 0;\n"
    for table in (*VECTORS, *TERMS, "lex_vocab")
) + "".join(f"UPDATE {table} SET chk = {PG_VECTOR_CHECK};\n" for table in VECTORS)
"""Schema 11: the checksum column of the derived index rows (tables created by earlier migrations
since this one have it already: the statements are no-ops there), and the vectors' checksums,
computed by the server; :func:`fill_checks` computes the lexical rows' and stems'."""


def fill_checks(conn: Any) -> int:
    """Schema 11's second half: the checksum of every lexical and vocabulary row already there,
    a batch at a time; returns the rows done."""
    jobs: list[tuple[str, str, str, Callable[[tuple[Any, ...]], int]]] = [
        *(
            (
                t,
                "rowid",
                "rowid, repository, len, terms",
                lambda r: terms_check(r[0], r[1], r[2], bytes(r[3])),
            )
            for t in TERMS
        ),
        ("lex_vocab", "id", "id, term, repository", lambda r: vocab_check(r[0], r[1], r[2])),
    ]
    done = 0
    for table, key, columns, check in jobs:
        last = -(2**63)
        while rows := conn.execute(
            f"SELECT {columns} FROM {table} WHERE {key} > %s ORDER BY {key} LIMIT 5000", (last,)
        ).fetchall():
            conn.execute(
                f"UPDATE {table} t SET chk = u.c FROM unnest(%s::bigint[], %s::bigint[]) u(k, c) "
                f"WHERE t.{key} = u.k",
                ([r[0] for r in rows], [check(r) for r in rows]),
            )
            last, done = rows[-1][0], done + len(rows)
    return done


MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, _V1),
    (LEXICON_VERSION, LEXICON_SQL),
    (3, POSTGRES_TOKEN_TABLE),
    (4, _V4_SKILLS),
    (SIGNING_VERSION, SIG_STREAMS_SQL),
    (TITLES_VERSION, TITLES_SQL),
    (HALFVEC_VERSION, HALFVEC_SQL),
    (WINDOWS_VERSION, WINDOWS_SQL),
    (ENTRY_IDS_VERSION, ENTRY_IDS_SQL),
    (INSTRUCTIONS_VERSION, INSTRUCTIONS_SQL),
    (CHECKS_VERSION, CHECKS_SQL),
    (PROPOSALS_VERSION, PROPOSALS_SCHEMA),
    (WEBHOOKS_VERSION, POSTGRES_WEBHOOK_SCHEMA),
    (SCOPES_VERSION, SCOPES_SQL),
    (ENTITY_TYPES_VERSION, ENTITY_TYPES_SQL),
    (BRANCHES_VERSION, BRANCHES_SQL),
)
"""(version, SQL with ``{dim}`` and ``{schema}`` placeholders), applied in order on open."""
