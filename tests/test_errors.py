"""``mentis/errors.py``: one tree, each class with its HTTP status (the one table REST and the
dashboard answer with) and its CLI exit code."""

from __future__ import annotations

import mentis.errors
from mentis.errors import MentisError, MissingExtra, NotFound

CLASSES = [getattr(mentis.errors, name) for name in mentis.errors.__all__]


def _instance(cls: type[MentisError]) -> MentisError:
    return MissingExtra("m", "x") if cls is MissingExtra else cls("m")


def test_every_error_class_states_its_own_http_status() -> None:
    for cls in CLASSES:
        assert "http_status" in vars(cls), cls  # its own row, not its parent's by accident
        assert 400 <= _instance(cls).http_status < 600


def test_a_new_subclass_takes_its_parents_status() -> None:
    class Newer(NotFound):
        pass

    assert Newer("m").http_status == 404
    assert isinstance(Newer("m"), MentisError)
