"""core: see docs/design.md."""
