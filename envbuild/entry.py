"""The `envbuild` console script's entry point.

`envbuild lock DIR` gets its head start (envbuild/headstart.py: the uv commands the folder's
last lock ran) before click and the command line are imported, which is a tenth of a warm
lock's time on a 2-core machine; every command then runs through `envbuild.cli.main`, where
click parses the command line as it always does. The early look at the arguments only picks
what to start: the lock command takes it only when click's reading of them agrees.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["lock"]:
        from envbuild import headstart

        headstart.begin_early(sys.argv[2:])
    from envbuild.cli import main as cli_main

    cli_main()
