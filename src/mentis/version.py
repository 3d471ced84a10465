"""The package's version, at the bottom of the layers so that any module may name it without
importing the package root (pyproject.toml reads it from here: ``[tool.setuptools.dynamic]``)."""

__version__ = "0.1.0"
