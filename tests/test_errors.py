"""``mentis/errors.py``: every error Mentis raises on purpose, in one tree whose drawing (the module
docstring) states each class's parent, HTTP status (the one table REST and the dashboard answer
with) and CLI exit code."""

from __future__ import annotations

import importlib
import pkgutil
import re

import mentis
import mentis.errors
from mentis.errors import MentisError, NotFound

CLASSES = {name: getattr(mentis.errors, name) for name in mentis.errors.__all__}
ROW = re.compile(r"^    (?P<tree>[│├└─ ]*)(?P<name>[A-Z]\w+) +(?P<http>\d{3}) +(?P<exit>\d+)  \S")


def drawn() -> dict[str, tuple[str | None, int, int]]:
    """Each class in the drawing: (its parent, HTTP status, exit code)."""
    rows: dict[str, tuple[str | None, int, int]] = {}
    parents: list[str] = []  # the class at each depth so far
    for line in (mentis.errors.__doc__ or "").splitlines():
        if m := ROW.match(line):
            depth = len(m["tree"]) // 4
            parents[depth:] = [m["name"]]
            rows[m["name"]] = (parents[depth - 1] if depth else None, int(m["http"]), int(m["exit"]))
    return rows


def test_the_drawn_tree_is_the_tree_of_error_classes() -> None:
    assert set(drawn()) == set(CLASSES)
    for name, (parent, http_status, exit_code) in drawn().items():
        cls = CLASSES[name]
        assert cls.__bases__[0].__name__ == (parent or "Exception"), name
        assert (cls.http_status, cls.exit_code) == (http_status, exit_code), name
        assert 400 <= http_status < 600


def test_every_exception_class_of_mentis_is_in_the_tree() -> None:
    for module in pkgutil.walk_packages(mentis.__path__, "mentis."):
        if module.name != "mentis.__main__":  # that one runs the CLI
            importlib.import_module(module.name)

    def subclasses(cls: type[BaseException]) -> set[type[BaseException]]:
        return {cls} | {c for sub in cls.__subclasses__() for c in subclasses(sub)}

    ours = {
        cls
        for cls in subclasses(Exception)
        if cls.__module__.startswith("mentis.") and not cls.__name__.startswith("_")
    }
    outside = {f"{cls.__module__}.{cls.__qualname__}" for cls in ours if cls.__module__ != "mentis.errors"}
    outside.discard("mentis.ledger.signing.Prepared")  # no error: the service's signing step drops it
    assert outside == {"mentis.mcp.remote_http.CapExceeded"}  # httpx's, translated at the boundary


def test_a_new_subclass_takes_its_parents_status() -> None:
    class Newer(NotFound):
        pass

    assert Newer("m").http_status == 404
    assert isinstance(Newer("m"), MentisError)
