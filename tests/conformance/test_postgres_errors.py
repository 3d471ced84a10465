"""Every driver error the PostgreSQL store can meet becomes a Mentis error (STYLE §4)."""

from __future__ import annotations

import pytest

from mentis.errors import IntegrityError, MentisError, QueryError, StoreError

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'mentis[postgres]')")

from psycopg import errors as pg  # noqa: E402
from psycopg_pool import PoolTimeout  # noqa: E402

from mentis.store.postgres.connection import query_error, redact, store_error  # noqa: E402

URL = "postgresql://mentis:hunter2@db.internal/mentis"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (PoolTimeout("no connection"), StoreError),
        (psycopg.OperationalError("connection refused"), StoreError),
        (pg.QueryCanceled("canceling statement"), StoreError),
        (pg.DiskFull("no space"), StoreError),
        (pg.InsufficientPrivilege("permission denied"), StoreError),
        (pg.UndefinedFile("could not open extension control file"), StoreError),
        (pg.UniqueViolation("duplicate key"), StoreError),
        (psycopg.Error("anything else"), StoreError),
    ],
)
def test_each_driver_error_maps_to_a_store_error_without_the_password(exc: Exception, kind: type) -> None:
    mapped = store_error("write", URL, exc)
    assert type(mapped) is kind
    assert "hunter2" not in str(mapped)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (pg.QueryCanceled("canceling statement due to statement timeout"), QueryError),
        (pg.InsufficientPrivilege("permission denied for table entries"), QueryError),
        (pg.ReadOnlySqlTransaction("cannot execute in a read-only transaction"), QueryError),
        (pg.UndefinedTable("relation does not exist"), QueryError),
        (pg.UndefinedFunction("function does not exist"), QueryError),
        (psycopg.OperationalError("server closed the connection"), StoreError),
    ],
)
def test_each_recall_error_maps_to_a_query_or_store_error(exc: Exception, kind: type) -> None:
    assert type(query_error(exc, 5.0)) is kind


def test_a_changed_body_raised_inside_a_view_is_an_integrity_error() -> None:
    class BodyChanged(psycopg.Error):
        sqlstate = "MT001"

    assert isinstance(query_error(BodyChanged("x"), 5.0), IntegrityError)
    assert isinstance(store_error("read", URL, BodyChanged("x")), IntegrityError)
    assert all(issubclass(k, MentisError) for k in (StoreError, QueryError, IntegrityError))


def test_the_url_in_messages_hides_the_password() -> None:
    assert redact(URL) == "postgresql://mentis:***@db.internal/mentis"
