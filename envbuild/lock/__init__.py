"""lock: see docs/design.md."""
