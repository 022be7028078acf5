"""One module per command; each exposes `command`, a click.Command. Imported lazily by cli.py."""
