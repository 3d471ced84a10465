"""The retrieval evaluation behind ``bench/eval.py``, split by job (see its docstring)."""
