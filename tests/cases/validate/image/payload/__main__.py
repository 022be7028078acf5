"""Stand-in smoke payload: prints the report a CPU torch image's payload would print."""

import json
import os
import sys

FAIL = os.environ.get("STANDIN_OUTCOME") == "fail"
NAMES = ("gpu-visible", "cuda-build", "driver-floor", "shm", "loss-falling", "grads")
checks = [
    {
        "name": n,
        "tier": 1,
        "status": "fail"
        if FAIL and n == "loss-falling"
        else ("skip" if n != "shm" and n.startswith(("gpu", "cuda", "driver")) else "pass"),
        "figure": "stand-in",
        "hint": "stand-in hint" if FAIL and n == "loss-falling" else "",
    }
    for n in NAMES
]
report = {
    "schema": 1,
    "ok": not FAIL,
    "framework": "torch",
    "device": "cpu",
    "checks": checks,
    "versions": {"framework": {"seen": "2.7.1"}},
    "argv": sys.argv[1:],
}
print("stand-in payload", file=sys.stderr)
print("ENVBUILD-SMOKE-REPORT " + json.dumps(report, sort_keys=True))
sys.exit(1 if FAIL else 0)
