"""cuda: see docs/design.md."""
