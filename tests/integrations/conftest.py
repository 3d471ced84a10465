"""Every background server a test's hooks started is stopped when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .hook_helpers import stop_servers


@pytest.fixture(autouse=True)
def no_background_server_left(tmp_path: Path) -> Iterator[None]:
    yield
    stop_servers(tmp_path)
