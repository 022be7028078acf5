"""request: see docs/design.md."""
