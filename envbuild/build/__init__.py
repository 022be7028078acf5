"""build: see docs/design.md."""
