"""engine: see docs/design.md."""
