"""Python's cyclic garbage collector held off while a large, acyclic result is built.

CPython's collector starts a young-generation pass every 700 net container allocations and,
now and then, a full pass over every live object (https://docs.python.org/3/library/gc.html,
`gc.set_threshold`; devguide.python.org/internals/garbage-collector/). A fleet view keeps one
result per host alive until it is printed, so each full pass walks everything built so far:
at 100,000 hosts the passes took 31% of the view's time and made it grow faster than the host
count (benchmarks/results/scale.md). The per-host results hold no reference cycles, so holding
the collector off loses nothing; reference counting still frees everything as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_collector_paused() -> Iterator[None]:
    """Hold the cyclic collector off for the block, then put it back as it was (also on an
    error), so a caller that had disabled it itself keeps it disabled."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
