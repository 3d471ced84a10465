"""Harness hooks: record the checks an agent runs and surface related attempts (``mentis hook``).

Kept light on purpose: importing this package loads the standard library, git helpers and the
secret scrubber, not the store or the embedding model (see ``run`` and ``backend``).
"""
