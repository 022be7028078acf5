"""Crashes before writing a report (an import error inside the image)."""

import sys

print("starting", file=sys.stderr)
raise SystemExit("ImportError: libcudnn.so.9: cannot open shared object file")
