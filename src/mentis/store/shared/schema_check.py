"""Open compares the database's schema with the one this Mentis expects (issue 24, the schema gap).

A schema edit that still parses (a column type renamed, an index redefined, a trigger or view
added) changes what the SQL means without failing it: ``rowid IXTEGER PRIMARY KEY`` is no longer
the rowid, so a derived table reads back empty columns. Open therefore describes every table,
index, view and trigger and compares the description with the expected one; a difference is a
:class:`~mentis.errors.StoreError` naming each object, what was found and what was expected, and
how to recover: a derived table (or anything on one) is recreated by ``mentis rebuild``; the
ledger's own tables (entries, bodies, heads, entry_ids, meta) are restored from a backup or an export, and
an object Mentis never creates is dropped.

- **SQLite**: the expected schema is this code's own DDL, run in an in-memory database once per
  process. Each object is described by its ``CREATE`` text as SQLite keeps it (whitespace runs
  folded), which is what SQLite itself parses; tables and indexes must also have distinct,
  non-zero root pages (an edited root page makes two objects share a b-tree).
- **PostgreSQL**: the expected schema is the description taken when the migrations last ran
  (kept in ``meta``, ``schema_description``; a database migrated before this check existed is
  described on its first open). Each table's columns (type, nullability, default), constraints,
  indexes and triggers, the recall views and the two functions they call are compared.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from mentis.errors import StoreError

LEDGER_TABLES = frozenset({"entries", "bodies", "heads", "meta", "entry_ids"})
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Difference:
    """One object whose definition is not the expected one (``found`` or ``expected`` None: it
    is missing, or it should not be there)."""

    name: str
    table: str
    found: str | None
    expected: str | None
    derived: bool

    def describe(self) -> str:
        if self.found is None:
            return f"{self.name} is missing (expected {self.expected})"
        if self.expected is None:
            return f"{self.name} is not Mentis's ({self.found})"
        return f"{self.name} is {self.found}, expected {self.expected}"


REBUILD = "run `mentis rebuild`, which drops every derived table and recreates it from the ledger"
"""How the SQLite store's derived tables are recovered."""
MIGRATE = (
    "copy the store into an empty database with `mentis migrate --from <this URL> --to <a new URL>`, "
    "which reads only the ledger and derives every table anew"
)
"""How the PostgreSQL store's derived tables are recovered (a rebuild empties them, but keeps
their definitions)."""


def schema_error(where: str, differences: list[Difference], derived_fix: str) -> StoreError:
    """The error for a schema that differs: what differs, and how to recover (``derived_fix``
    when only derived tables differ)."""
    shown = "; ".join(d.describe() for d in differences[:5])
    more = f" (and {len(differences) - 5} more)" if len(differences) > 5 else ""
    if all(d.derived for d in differences):
        fix = f"these are derived tables: {derived_fix}"
    else:
        ledger = sorted({d.table for d in differences if not d.derived})
        fix = (
            f"{', '.join(ledger)}: the ledger's own tables, or not Mentis's: drop what Mentis never "
            "creates, else restore the store from a backup or an export"
        )
    return StoreError(
        f"the schema of {where} differs from the one this Mentis expects (changed outside Mentis): "
        f"{shown}{more}. Nothing was read or written; {fix}"
    )


def compare(
    found: dict[str, tuple[str, str]],
    expected: dict[str, tuple[str, str]],
    derived: Collection[str],
    optional: Collection[str] = (),
) -> list[Difference]:
    """Objects (name → (table, definition)) that differ between ``found`` and ``expected``; an
    object on a table in ``derived`` (or named there) is the rebuild's to recreate; one on a
    table in ``optional`` may be missing (a table made when first used)."""
    out = []
    for name in sorted(found.keys() | expected.keys()):
        have, want = found.get(name), expected.get(name)
        if have == want or (have is None and want is not None and want[0] in optional):
            continue
        table = (have or want or ("", ""))[0]
        out.append(
            Difference(
                name,
                table,
                None if have is None else have[1],
                None if want is None else want[1],
                table in derived or name in derived,
            )
        )
    return out


# ---------------------------------------------------------------- SQLite


def sqlite_objects(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """name → (table, definition) of every table, index, view and trigger in ``main``."""
    out: dict[str, tuple[str, str]] = {}
    for type_, name, table, sql in conn.execute(
        "SELECT type, name, tbl_name, sql FROM main.sqlite_master WHERE name <> 'sqlite_sequence'"
    ):
        text = "(made by its table's constraints)" if sql is None else _SPACE.sub(" ", str(sql)).strip()
        out[str(name)] = (str(table), f"{type_} `{text}`")
    return out


def sqlite_root_pages(conn: sqlite3.Connection) -> list[Difference]:
    """Tables and indexes that share a root page or have none (an edited ``rootpage``)."""
    seen: dict[int, str] = {}
    out = []
    for name, table, root in conn.execute(
        "SELECT name, tbl_name, rootpage FROM main.sqlite_master WHERE type IN ('table', 'index') "
        "ORDER BY name"
    ):
        if not isinstance(root, int) or root < 1 or root in seen:
            other = f", as {seen[root]} does" if isinstance(root, int) and root in seen else ""
            found = f"stored at root page {root!r}{other}"
            out.append(Difference(str(name), str(table), found, "a root page of its own", False))
        else:
            seen[root] = str(name)
    return out


@functools.cache
def sqlite_expected(ddl: str) -> dict[str, tuple[str, str]]:
    """The objects ``ddl`` (``;``-separated statements, as the store runs them) creates."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        return sqlite_objects(conn)
    finally:
        conn.close()


def sqlite_differences(
    conn: sqlite3.Connection, ddl: str, derived: Collection[str], optional: Collection[str] = ()
) -> list[Difference]:
    """How the file's schema differs from what ``ddl`` creates (objects on ``optional`` tables
    may be missing: their DDL is part of ``ddl`` but runs when they are first used)."""
    found = sqlite_objects(conn)
    return compare(found, sqlite_expected(ddl), derived, optional) + sqlite_root_pages(conn)


# ---------------------------------------------------------------- PostgreSQL


PG_DESCRIBE = """
SELECT c.relname, c.relname, 'table ' || c.relname || '(' || string_agg(
         a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
         || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum)
       || ')' || CASE c.relpersistence WHEN 'u' THEN ' UNLOGGED' ELSE '' END
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname = ANY(%(tables)s)
GROUP BY c.relname, c.relpersistence
UNION ALL
SELECT i.indexname, i.tablename, 'index ' || i.indexdef FROM pg_indexes i
WHERE i.schemaname = current_schema() AND i.tablename = ANY(%(tables)s)
UNION ALL
SELECT con.conname || ' on ' || c.relname, c.relname, 'constraint ' || pg_get_constraintdef(con.oid)
FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%(tables)s)
UNION ALL
SELECT t.tgname || ' on ' || c.relname, c.relname, 'trigger ' || pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%(tables)s)
UNION ALL
SELECT 'view ' || v.schemaname || '.' || v.viewname, v.viewname, 'view ' || v.definition FROM pg_views v
WHERE v.schemaname = %(views)s
UNION ALL
SELECT 'function ' || p.proname, p.proname, 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = ANY(%(functions)s)
"""
"""(name, table, definition) of each object Mentis keeps in PostgreSQL: its tables' columns,
constraints, indexes and triggers, the recall views and the functions Mentis defines."""


def pg_objects(rows: Iterable[tuple[Any, Any, Any]]) -> dict[str, tuple[str, str]]:
    """name → (table, definition) from :data:`PG_DESCRIBE`'s rows."""
    return {str(name): (str(table), _SPACE.sub(" ", str(text)).strip()) for name, table, text in rows}


__all__ = [
    "LEDGER_TABLES",
    "MIGRATE",
    "PG_DESCRIBE",
    "REBUILD",
    "Difference",
    "compare",
    "pg_objects",
    "schema_error",
    "sqlite_differences",
    "sqlite_expected",
    "sqlite_objects",
]
