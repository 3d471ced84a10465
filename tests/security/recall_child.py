"""Runs one ``recall`` SQL statement on a SQLite store in a process of its own and prints one JSON
line: the outcome and the process's peak resident memory before and after (``ru_maxrss``, KiB).

    python tests/security/recall_child.py DB_PATH SQL
    python tests/security/recall_child.py DB_PATH SQL postgresql://…   (the PostgreSQL store)
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from mentis.api.attempts import RecallInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import MentisError
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory


def main(db_path: str, sql: str, database_url: str | None = None) -> None:
    path = Path(db_path)
    settings = Settings(home=path.parent, db_path=path, embedder="hash", database_url=database_url)
    memory = Memory.open(settings, HashEmbedder())
    caller = Caller(agent_id="attacker", can_write=False, repositories=("team-a/*",))
    memory.recall(caller, parse(RecallInput, {"sql": "select count(*) from attempts"}))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out: dict[str, object]
    try:
        result = memory.recall(caller, parse(RecallInput, {"sql": sql}))
        out = {"code": None, "rows": len(result.rows), "truncated": result.truncated}
        out["first"] = result.rows[0] if result.rows and len(json.dumps(result.rows[0])) < 200 else None
        out["column0"] = [str(row[0])[:20] for row in result.rows]
    except MentisError as exc:
        out = {"code": exc.code, "message": exc.message}
    out["rss_before_kib"] = before
    out["rss_peak_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    memory.close()
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
