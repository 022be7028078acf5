"""Use cases: one keyword-only function per command. Commands call these; these call the pure
core and the I/O edges. Heavy modules are imported inside the functions so the CLI starts fast.

Each section below is owned by one use case; keep edits inside your section.
"""

from __future__ import annotations

# --- resolve ---------------------------------------------------------------------------------

# --- lock ------------------------------------------------------------------------------------

# --- render ----------------------------------------------------------------------------------

# --- image -----------------------------------------------------------------------------------

# --- smoke -----------------------------------------------------------------------------------

# --- doctor / validate -----------------------------------------------------------------------

# --- matrix ----------------------------------------------------------------------------------
