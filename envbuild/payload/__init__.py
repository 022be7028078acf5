"""The smoke payload: runs inside every image (and on hosts via `envbuild smoke`).

Standard library plus the framework only; never imports `envbuild.*`. Run it as a folder:
`python /opt/envbuild/payload --plan /opt/envbuild/plan.json [--allow-cpu] [--tier 1|2]
[--verdict PATH|-]`. The last stdout line is `ENVBUILD-SMOKE-REPORT {compact json}`; exit 0 =
pass, 1 = fail. `--verdict` also writes the node's verdict (<= 4 KiB, `smoke_checks.verdict_of`)
to PATH (a Kubernetes termination message) or, with `-`, as a stdout line before the report.
"""
