"""The old console-script target, kept so that an `envbuild` script installed before
pyproject.toml named `envbuild.cli.main:main` still starts (and `python -m envbuild.cli.entry`
runs the CLI). Nothing happens here before click: see `envbuild.cli.main.main`."""

from __future__ import annotations

from envbuild.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
