"""The `envbuild` console script's entry point.

`envbuild lock DIR` gets its head start (envbuild/lock/headstart.py: the uv commands the folder's
last lock ran) before click and the command line are imported, which is a tenth of a warm
lock's time on a 2-core machine; every command then runs through `envbuild.cli.main.main`, where
click parses the command line as it always does. The early look at the arguments only picks
what to start: the lock command takes it only when click's reading of them agrees.
"""

from __future__ import annotations

import sys


def _terminated(signum: int, frame: object) -> None:
    # SIGTERM before envbuild.cli.main installs its own handler: end through SystemExit, so the
    # exit handler that stops what was started early still runs (a default SIGTERM would
    # leave it running with its folder). 143: what a shell reports for SIGTERM.
    raise SystemExit(143)


def main() -> None:
    if sys.argv[1:2] == ["lock"]:
        import _signal  # type: ignore[import-not-found]  # signal.py's enums are not needed

        from envbuild.lock import headstart

        _signal.signal(_signal.SIGTERM, _terminated)
        headstart.begin_early(sys.argv[2:])
    from envbuild.cli.main import main as cli_main

    cli_main()
