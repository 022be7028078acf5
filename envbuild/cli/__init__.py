"""cli: see docs/design.md."""
