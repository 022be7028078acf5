"""smoke: see docs/design.md."""
