"""Hangs (a GPU or NCCL call that never returns)."""

import time

time.sleep(3600)
