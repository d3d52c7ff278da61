"""``python -m rlightning``: the versions for a bug report."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from rlightning.__main__ import DISTRIBUTIONS, THIRD_PARTY, system_info


def test_system_info_names_every_distribution_and_the_gpu() -> None:
    info = system_info()
    for name in (*DISTRIBUTIONS, *THIRD_PARTY, "python", "platform", "gpu"):
        assert name in info
    assert info["rlightning-core"] == metadata.version("rlightning-core")
    assert info["python"] == sys.version.split()[0]
    assert "rlightning-core requires" in info
    assert "gymnasium" in info["rlightning-core requires"]


def test_module_prints_one_line_per_entry() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlightning"], capture_output=True, text=True, check=True
    ).stdout
    lines = out.splitlines()
    assert lines[0].split()[0] == "rlightning-core"
    assert len(lines) == len(system_info())
    assert any(line.startswith("gpu") for line in lines)
