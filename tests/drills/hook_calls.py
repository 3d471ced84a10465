"""A stream of hook calls from one checkout, for tests/drills/test_hook_servers.py.

    python tests/drills/hook_calls.py CHECKOUT HARNESS CALLS HOME [HOME …]

Each call is what a ``mentis hook`` process does after reading git: ``open_backend`` (find this
store's background server, start it when none answers) and one REST call on the connection it
returns, here in a loop in one process rather than one process a call (a process costs about
0.1 s of CPU, which a thousand calls in CI cannot afford). Calls alternate over the HOMEs (each
its own store); every fourth records an attempt, the others search. The process prints ``ready``,
waits for a line on stdin (so every worker starts at once, racing to start the servers), then
prints one JSON line per call: the home, the operation, and the attempt's observation or the
error.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mentis.config import Settings
from mentis.errors import MentisError
from mentis.integrations import git
from mentis.integrations.hooks.backend import open_backend


def main() -> None:
    checkout, harness, calls, homes = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    repository, branch = git.repository_identity(checkout), git.head(checkout)[1] or "detached"
    idle_s = int(os.environ["MENTIS_HOOK_IDLE_S"])
    settings = {}
    for home in homes:  # as a hook run with MENTIS_HOME=home reads them
        os.environ["MENTIS_HOME"] = home
        settings[home] = Settings.from_env()
    print("ready", flush=True)
    sys.stdin.readline()
    for n in range(calls):
        home = homes[n % len(homes)]
        line: dict[str, object] = {"home": home}
        if n % 4 == 3:
            line["operation"] = "record_attempt"
            line["observation"] = f"{harness} in {checkout.name} (pid {os.getpid()}): call {n}"
            body: dict[str, object] = {
                "repository": repository,
                "task_id": branch,
                "action": "ran `pytest -q`",
                "observation": line["observation"],
                "tags": ["hook", harness],
            }
        else:
            line["operation"] = "search"
            body = {"query": "invoice rounding", "repository": repository, "limit": 5}
        try:
            backend = open_backend(None, None, settings[home], harness, idle_s)
            try:
                backend.call(str(line["operation"]), body)
            finally:
                backend.close()
        except MentisError as exc:
            line["error"] = str(exc)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
