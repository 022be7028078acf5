"""render: see docs/design.md."""
