"""envbuild: resolve, lock, render, build and smoke-test GPU training images."""

__version__ = "0.1.0"
