"""preflight: see docs/design.md."""
