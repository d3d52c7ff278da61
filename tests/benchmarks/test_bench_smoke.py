"""Smoke test of the benchmarks: they run, and the results file has every row.

Speed is not asserted here (benchmarks compare side by side; see docs/performance.md). This runs
``python -m benchmarks.run --smoke`` in a subprocess, as ``tox -e bench`` runs the full version,
and checks the file it writes.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"wrote {out}" in proc.stdout
    return json.loads(out.read_text())


def test_every_expected_row_is_present(results: dict) -> None:
    from benchmarks.run import expected_rows

    expected = expected_rows()
    have = {(row["case"], row["impl"]) for row in results["rows"]}
    missing = [pair for pair in expected if pair not in have]
    assert not missing, f"rows missing from results.json: {missing}"
    items = {row["item"] for row in results["rows"]}
    assert items == {1, 2, 3, 4, 5, 6, 7}
    # The comparisons, spelled out: a floor and rlightning in every case, the anchors
    # in items 1-3 and 5's tensor case.
    cases = {row["case"] for row in results["rows"]}
    for case in cases:
        assert (case, "floor") in have
        assert (case, "rlightning") in have
    for case in ("1.build", "2.numpy", "2.cpu", "3.build", "3.numpy", "3.cpu", "5.pickle_tensors"):
        assert (case, "tensordict") in have
        assert (case, "batch") in have
    assert ("1.build", "dict") in have


def test_rows_are_measured_or_say_why_not(results: dict) -> None:
    for row in results["rows"]:
        if row["status"] == "skipped":
            assert row["reason"], row
            continue
        assert row["status"] == "ok", row
        assert math.isfinite(row["median_s"])
        assert row["median_s"] > 0
        assert row["q1_s"] <= row["median_s"] <= row["q3_s"]
        assert row["n"] >= 1
        assert row["repeats"] == results["meta"]["repeats"]


def test_core_rows_always_run(results: dict) -> None:
    # rlightning-core and its floors need nothing beyond torch: they are never skipped.
    for row in results["rows"]:
        if row["item"] <= 5 and row["impl"] in ("floor", "rlightning", "dict"):
            if row["case"] == "5.ray_64mb_tensor" or "cuda" in row["case"]:
                continue  # needs the optional ray, or a GPU
            assert row["status"] == "ok", row


def test_pickle_rows_report_size_and_payload(results: dict) -> None:
    for row in results["rows"]:
        if row["item"] == 5 and row["status"] == "ok" and "zero_copy_get" not in row:
            assert row["size_bytes"] > 0
            assert row["payload_bytes"] > 0
            assert row["overhead_bytes"] == row["size_bytes"] - row["payload_bytes"]


def test_every_target_is_evaluated(results: dict) -> None:
    targets = results["targets"]
    assert {t["item"] for t in targets} == {1, 2, 3, 4, 5, 6, 7, 19, 20}  # 19, 20: training
    for target in targets:
        if target["value"] is None:
            assert target["met"] is None
        else:
            assert target["met"] is (target["value"] <= target["limit"])


def test_report_renders_from_the_smoke_results(results: dict, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks.report import write_docs

    write_docs(results, tmp_path)
    page = (tmp_path / "performance.md").read_text()
    assert page.startswith("# Performance")
    for case in ("1.build", "2.numpy", "4.numpy_bf16", "5.pickle_64mb", "6.act_n64", "7.pz_n2000"):
        assert f"`{case}`" in page
    png = (tmp_path / "performance.png").read_bytes()
    assert png.startswith(b"\x89PNG")


_ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:home|work|tmp|Users|root|usr|opt|var|private|mnt)/")


def test_generated_pages_record_no_absolute_paths(results: dict, tmp_path: Path) -> None:
    """The page and results name files relative to the repository, never this machine's paths."""
    pytest.importorskip("matplotlib")
    from benchmarks.report import write_docs

    write_docs(results, tmp_path)  # the smoke run was given an absolute --out path
    fresh = (tmp_path / "performance.md").read_text() + json.dumps(results)
    committed = (ROOT / "docs" / "performance.md").read_text() + (
        ROOT / "benchmarks" / "results.json"
    ).read_text()
    for name, text in (("fresh", fresh), ("committed", committed)):
        assert str(ROOT) not in text, name
        assert str(tmp_path.parent) not in text, name
        assert _ABSOLUTE.findall(text) == [], name


@pytest.fixture(scope="module")
def instructions(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # Under valgrind when it is installed (R=5, n_envs=1, two adapter calls per profiled
    # function); without it the same worker runs every region natively and the rows say why
    # they have no counts, so the code path is exercised either way.
    out = tmp_path_factory.mktemp("callgrind") / "instructions.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.callgrind", "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_instruction_rows_cover_predict_and_act(instructions: dict) -> None:
    from benchmarks.callgrind import CALLS_SMOKE, IMPLS, KINDS, valgrind_path

    rows = instructions["rows"]
    assert {(r["kind"], r["impl"], r["n_envs"]) for r in rows} == {
        (kind, impl, 1) for kind in KINDS for impl in IMPLS[kind]
    }
    assert all(r["calls"] == CALLS_SMOKE for r in rows)
    if valgrind_path() is None:
        assert all(r["status"] == "skipped" and r["reason"] for r in rows)
        assert instructions["meta"]["valgrind"] is None
        return
    for row in rows:
        assert row["status"] == "ok", row
        assert row["ir_per_call"] > 10_000  # a forward pass of PPO's MLP, at least
        assert len(row["ir_per_call_rounds"]) == 2
        if row["impl"] != "floor":
            floor = next(r for r in rows if r["kind"] == row["kind"] and r["impl"] == "floor")
            assert row["overhead"] == pytest.approx(row["ir_per_call"] / floor["ir_per_call"] - 1)


def test_instruction_profile_names_the_adapter_functions(instructions: dict) -> None:
    from benchmarks.callgrind import valgrind_path

    if valgrind_path() is None:
        assert instructions["profile"] == []  # no counts to attribute
        return
    measured = {(e["kind"], e["function"]) for e in instructions["profile"] if e["status"] == "ok"}
    assert ("predict", "rlightning_sb3.adapter.SB3PolicyAdapter.predict") in measured
    assert ("act", "rlightning_sb3.adapter.SB3PolicyAdapter.act") in measured
    for entry in instructions["profile"]:
        if entry["status"] == "ok":
            assert entry["wrapped_calls_per_step"] >= 1
            assert math.isfinite(entry["ir_per_step"])
            if entry["function"].startswith("rlightning_sb3.adapter."):
                # the whole public call holds the forward pass: more than the floor's half
                assert entry["of_floor"] > 0.5, entry


def test_instruction_targets_are_evaluated(instructions: dict, tmp_path: Path) -> None:
    from benchmarks.callgrind import LIMITS, valgrind_path
    from benchmarks.report import instruction_tables
    from benchmarks.targets import evaluate

    targets = [t for t in evaluate([], instructions) if "instructions" in t["target"]]
    assert {(t["case"], t["limit"]) for t in targets} == {
        (f"6.{kind}_n{n}", limit) for (kind, n), limit in LIMITS.items()
    }
    for target in targets:
        measured = valgrind_path() is not None and target["case"].endswith("_n1")
        assert (target["value"] is not None) is measured
        if measured:
            assert target["met"] is (target["value"] <= target["limit"])
    table = instruction_tables(instructions)
    assert "`6.predict_n1`" in table
    assert "`6.act_n1`" in table


def test_the_training_iteration_rows_run_the_same_work(tmp_path: Path) -> None:
    # benchmarks.loop_cost's worker checks that SB3's collect_rollouts and the response loop
    # fill equal buffers before it counts anything; natively here (no valgrind: seconds), so
    # the rows say why they have no counts and the targets say "not measured"
    from benchmarks.loop_cost import N_ENVS, table, targets

    out = tmp_path / "loop_cost.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.loop_cost", "--smoke", "--native", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = json.loads(out.read_text())
    rows = section["rows"]
    assert {(r["case"], r["impl"]) for r in rows} == {
        ("20.loop_n1", "collect_rollouts"),
        ("20.loop_n1", "rlightning"),
    }
    assert all(r["status"] == "skipped" and "without valgrind" in r["reason"] for r in rows)
    found = targets(section)
    assert [t["case"] for t in found] == [f"20.loop_n{n}" for n in N_ENVS]
    assert all(t["value"] is None and t["met"] is None and t["limit"] == 1.03 for t in found)
    assert "`20.loop_n1`" in table(section)


def test_the_shared_rollout_rows_run_the_same_work(tmp_path: Path) -> None:
    # benchmarks.pz_collect_cost's worker checks that SB3's collect_rollouts over the VecEnv of
    # the agents and SharedRolloutCollector fill equal buffers before it counts anything;
    # natively here (no valgrind: seconds), so the rows and the target say "not measured"
    from benchmarks.pz_collect_cost import CASE, table, targets

    pytest.importorskip("stable_baselines3")
    out = tmp_path / "pz_collect_cost.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.pz_collect_cost",
            "--smoke",
            "--native",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = json.loads(out.read_text())
    rows = section["rows"]
    assert [(r["case"], r["impl"]) for r in rows] == [
        (CASE, "collect_rollouts"),
        (CASE, "rlightning"),
    ]
    assert all(r["status"] == "skipped" and "without valgrind" in r["reason"] for r in rows)
    assert section["meta"]["n_copies"] == 8 and section["meta"]["n_steps"] == 8
    (found,) = targets(section)
    assert found["case"] == CASE and found["limit"] == 1.1
    assert found["value"] is None and found["met"] is None
    assert f"`{CASE}`" in table(section)
