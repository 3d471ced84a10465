"""The ``mentis`` executable: ``mentis hook …`` runs on a light path (standard library, git and
an HTTP call), everything else goes to the full CLI in ``mentis.cli``."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["hook"] and not {"--help", "-h"} & set(args):
        from mentis.integrations.hooks.run import main as hook_main

        sys.exit(hook_main(args[1:]))
    from mentis.cli import main as cli_main

    cli_main()
