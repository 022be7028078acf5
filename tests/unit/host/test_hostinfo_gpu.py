"""The real NVML probe, on a machine with an NVIDIA GPU (marked `gpu`; not part of `make test`)."""

from __future__ import annotations

import json

import pytest

from envbuild.host import probe as hostinfo
from envbuild.preflight import doctor

pytestmark = pytest.mark.gpu


def test_probe_facts_on_a_real_gpu() -> None:
    facts = hostinfo.probe_facts()
    assert json.loads(json.dumps(facts)) == facts  # JSON-able as it is
    assert facts["schema"] == hostinfo.FACTS_SCHEMA
    driver = facts["driver"]
    assert driver["nvml_error"] is None
    assert driver["version"] and driver["cuda"]
    assert driver["kernel_module_version"] in (None, driver["version"])
    assert facts["gpus"], "NVML lists no GPU"
    for gpu in facts["gpus"]:
        major, minor = gpu["cc"].split(".")
        assert major.isdigit() and minor.isdigit()
        assert gpu["memory_mib"] > 0
    host = hostinfo.probe_host()
    assert host.driver == driver["version"] and len(host.gpus) == len(facts["gpus"])
    findings = doctor.check_host(facts)
    assert {f.name for f in findings} >= {"driver", "gpu0", "shm"}
