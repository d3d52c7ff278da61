"""Turn a results document into a console summary, ``docs/performance.md`` and its bar chart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.targets import ANCHORS, ratio_to_anchor, ratio_to_floor

IMPL_LABELS = {
    "floor": "floor",
    "dict": "plain dict",
    "py_init": "SimpleNamespace subclass, Python __init__, no checks",
    "bare_batch": "forward + one stacked PolicyResponse in a ResponseBatch, no checks",
    "pytree": "torch.utils._pytree.tree_map walk",
    "rlightning": "rlightning",
    "tensordict": "TensorDict",
    "batch": "Tianshou Batch",
}

ITEM_TITLES = {
    1: "1. Build a 4-field response and call `to_dict()`",
    2: "2. `numpy()` and `cpu()` of the 4-field response",
    3: "3. A nested response: a dict of 16 per-agent tensors",
    4: "4. One 64 MB tensor field",
    5: "5. pickle, protocol 5: dumps + loads",
    6: "6. SB3 adapter per step (PPO MlpPolicy, CartPole-v1)",
    7: "7. PettingZoo adapter per step, per agent",
}

#: Why a target is missed, by case: filled in from the profiling notes (see the docs page).
MISSED_NOTES: dict[str, str] = {}


def fmt_time(seconds: float) -> str:
    """Format seconds with a unit that keeps 3 significant digits (ns, us, ms, s)."""
    for scale, unit in ((1e-6, "ns"), (1e-3, "us"), (1.0, "ms")):
        if seconds < scale * 0.9995:  # what would round to 1000 takes the next unit
            return f"{seconds / scale * 1e3:.3g} {unit}"
    return f"{seconds:.3g} s"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _label(row: dict[str, Any]) -> str:
    impl: str = row["impl"]
    label = IMPL_LABELS.get(impl, impl)
    if row.get("process") == "anchors":
        label += " (anchor interpreter)"
    return label


def _fmt_target_value(target: dict[str, Any]) -> str:
    value = target["value"]
    if value is None:
        return "not measured"
    unit = target["unit"]
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "fraction":
        return f"{value:+.1%}"
    if unit == "bytes":
        return f"{value:.0f} B"
    if unit == "copies":
        return "zero copy" if value == 0 else "copied"
    return f"{value:.2f} {unit}"


def _fmt_limit(target: dict[str, Any]) -> str:
    unit, limit = target["unit"], target["limit"]
    if unit == "fraction":
        return f"{limit * 100:g}%"
    if unit == "bytes":
        return f"{limit:.0f} B"
    if unit == "x":
        return f"{limit:g}x"
    if unit == "copies":
        return "zero copy"
    return f"{limit:g} {unit}"


def _met(target: dict[str, Any]) -> str:
    return {True: "yes", False: "**no**", None: "-"}[target["met"]]


def print_summary(results: dict[str, Any]) -> None:
    """Print one line per row (median, ratio to the floor) and the targets."""
    rows = results["rows"]
    print(f"{'case':<24} {'implementation':<36} {'median':>10} {'x floor':>8}")
    for row in rows:
        if row["status"] != "ok":
            print(f"{row['case']:<24} {_label(row):<36} skipped: {row['reason']}")
            continue
        ratio = ratio_to_floor(rows, row)
        per = " /agent" if row.get("per_divisor", 1) > 1 else ""
        print(
            f"{row['case']:<24} {_label(row):<36} {fmt_time(row['median_s']):>10}{per} "
            f"{_fmt_ratio(ratio):>8}"
        )
    if results.get("instructions"):
        from benchmarks.callgrind import print_instructions

        print("\ninstructions (callgrind):")
        print_instructions(results["instructions"])
    print("\ntargets:")
    for target in results.get("targets", []):
        print(
            f"  [{_met(target).strip('*'):>3}] {target['case']:<22} {target['target']:<55} "
            f"{_fmt_target_value(target)}"
        )


def _results_table(rows: list[dict[str, Any]], item: int) -> list[str]:
    item_rows = [r for r in rows if r["item"] == item]
    pickle_item = item == 5
    head = "| case | implementation | median | q1 - q3 | x floor |"
    sep = "|---|---|---:|---:|---:|"
    if item in (1, 2, 3):
        head += " rlightning / it |"
        sep += "---:|"
    if pickle_item:
        head += " size | over payload |"
        sep += "---:|---:|"
    lines = [head, sep]
    for row in item_rows:
        case = f"`{row['case']}`"
        if row["status"] != "ok":
            cells = [case, _label(row), f"skipped: {row['reason']}", "", ""]
            cells += [""] * ((item in (1, 2, 3)) + 2 * pickle_item)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        per = "/agent" if row.get("per_divisor", 1) > 1 else ""
        cells = [
            case,
            _label(row),
            f"{fmt_time(row['median_s'])}{per}",
            f"{fmt_time(row['q1_s'])} - {fmt_time(row['q3_s'])}",
            _fmt_ratio(ratio_to_floor(rows, row)),
        ]
        if item in (1, 2, 3):
            anchor = row["impl"] if row["impl"] in ANCHORS else None
            cells.append(_fmt_ratio(ratio_to_anchor(rows, row["case"], anchor)) if anchor else "")
        if pickle_item and "size_bytes" in row:
            cells += [f"{row['size_bytes']:,} B", f"{row['overhead_bytes']:,} B"]
        elif pickle_item:
            zero = row.get("zero_copy_get")
            cells += ["", "" if zero is None else f"zero-copy get: {'yes' if zero else 'no'}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Bar chart of time over the floor, items 1-5, one bar per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r["status"] == "ok" and r["item"] <= 5]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    colors = {
        "rlightning": "#1f77b4",
        "dict": "#7f7f7f",
        "py_init": "#bcbd22",
        "bare_batch": "#17becf",
        "pytree": "#9467bd",
        "tensordict": "#ff7f0e",
        "batch": "#2ca02c",
    }
    fig, ax = plt.subplots(figsize=(10, 0.75 * len(cases) + 1.5))
    height = 0.8 / 5
    labelled: set[str] = set()
    for i, case in enumerate(cases):
        present = []
        for impl in colors:
            row = next((r for r in rows if r["case"] == case and r["impl"] == impl), None)
            ratio = None if row is None else ratio_to_floor(results["rows"], row)
            if ratio is not None and ratio > 0 and math.isfinite(ratio):
                present.append((impl, ratio))
        for j, (impl, ratio) in enumerate(present):
            y = i + (j - (len(present) - 1) / 2) * height
            label = None if impl in labelled else IMPL_LABELS[impl]
            labelled.add(impl)
            ax.barh(y, ratio, height=height * 0.95, color=colors[impl], label=label)
            ax.text(ratio * 1.04, y, f"{ratio:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--", label="floor (raw calls)")
    ax.set_xscale("log")
    ax.set_xlim(0.1, None)
    ax.set_yticks(range(len(cases)), cases)
    ax.invert_yaxis()
    ax.set_xlabel("time / floor (log scale; lower is better, 1 = the raw calls)")
    rounds = results["meta"]["repeats"]
    ax.set_title(f"Time over the floor (median of per-round ratios, {rounds} rounds)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def before_after_table(results: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """rlightning's time and ratio to the floor, before optimisation and now, per case."""
    if baseline is None:
        return "(no baseline results file)"
    lines = [
        "| case | before | x floor before | now | x floor now |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        if row["impl"] != "rlightning" or row["status"] != "ok" or row["item"] > 5:
            continue
        old = next(
            (
                r
                for r in baseline["rows"]
                if r["case"] == row["case"] and r["impl"] == "rlightning" and r["status"] == "ok"
            ),
            None,
        )
        if old is None:
            continue
        lines.append(
            f"| `{row['case']}` | {fmt_time(old['median_s'])} | "
            f"{_fmt_ratio(ratio_to_floor(baseline['rows'], old))} | {fmt_time(row['median_s'])} | "
            f"{_fmt_ratio(ratio_to_floor(results['rows'], row))} |"
        )
    return "\n".join(lines)


def instruction_tables(section: dict[str, Any] | None) -> str:
    """Item 6's instruction counts (callgrind) and where the adapter's instructions go."""
    if not section:
        return (
            "Instruction counts: not measured in this run (`python -m benchmarks.run "
            "--callgrind`, or `python -m benchmarks.callgrind --merge benchmarks/results.json`, "
            "needs valgrind)."
        )
    meta = section["meta"]
    lines = [
        f"Instructions per call, counted with callgrind ({meta.get('valgrind') or 'no valgrind'}, "
        f"Python {meta['python']}, {meta['date_utc']}, {meta['mode']} mode): a loop of "
        f"{meta['calls']} calls minus the same loop of 0 calls, over {meta['calls']}; each "
        'region counted twice, the figure is the mean of the two ("spread": how far the two '
        "counts differ; the allocators' state moves them a little).",
        "",
        "| case | implementation | instructions per call | over the floor | each round | spread |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        label = IMPL_LABELS.get(row["impl"], row["impl"])
        if row["status"] != "ok":
            lines.append(f"| `{row['case']}` | {label} | skipped: {row['reason']} | | | |")
            continue
        over = f"{row['overhead']:+.2%}" if "overhead" in row else ""
        rounds = " / ".join(f"{v:+.2%}" for v in row.get("overhead_rounds", []))
        lines.append(
            f"| `{row['case']}` | {label} | {row['ir_per_call']:,.0f} | {over} | {rounds} | "
            f"{row['ir_spread']:.3%} |"
        )
    profile = [e for e in section.get("profile", []) if e["status"] == "ok"]
    if profile:
        lines += [
            "",
            "Where the adapter's instructions go: each rlightning function one adapter call runs,"
            " counted alone with its callees (inclusive), per adapter call, and as a share of the"
            f" floor's instructions ({meta['profile_steps']} adapter calls per function; the "
            "public method's own row is the whole call). The forward pass itself sits inside the "
            "function that calls it. The cost of the wrapper that isolates a function is measured "
            "on an empty function and subtracted; values within a few hundred instructions of zero "
            "are below that resolution.",
            "",
            "| kind | n_envs | function | calls per step | instructions per step | of the floor |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for e in profile:
            lines.append(
                f"| {e['kind']} | {e['n_envs']} | `{e['function']}` | "
                f"{e['wrapped_calls_per_step']:g} | {e['ir_per_step']:,.0f} | "
                f"{e['of_floor']:.2%} |"
            )
    missing = [e for e in section.get("profile", []) if e["status"] != "ok"]
    if missing:
        lines += [
            "",
            "Not measured (no binding to wrap): "
            + ", ".join(f"`{e['function']}` ({e['kind']})" for e in missing)
            + ".",
        ]
    return "\n".join(lines)


def loop_cost_table(section: dict[str, Any] | None) -> str:
    """The training-iteration table (:func:`benchmarks.loop_cost.table`)."""
    from benchmarks.loop_cost import table

    return table(section)


def write_docs(results: dict[str, Any], docs: Path, baseline: dict[str, Any] | None = None) -> None:
    """Write ``performance.md`` and ``performance.png`` into ``docs``.

    Args:
        results: This run's results document.
        docs: The folder to write into.
        baseline: Results of the code before optimisation (same harness), for the before/after
            table; None leaves that table out.
    """
    from benchmarks.docs_text import render

    docs.mkdir(parents=True, exist_ok=True)
    write_chart(results, docs / "performance.png")
    tables = {item: "\n".join(_results_table(results["rows"], item)) for item in ITEM_TITLES}
    tables[6] += "\n\n" + instruction_tables(results.get("instructions"))
    tables[6] += "\n\n" + loop_cost_table(results.get("loop_cost"))
    from benchmarks.pz_collect_cost import table as pz_collect_table

    tables[6] += "\n\n" + pz_collect_table(results.get("pz_collect_cost"))
    targets = ["| item | case | target | limit | measured | met |", "|---|---|---|---:|---:|---|"]
    for t in results.get("targets", []):
        targets.append(
            f"| {t['item']} | `{t['case']}` | {t['target']} | {_fmt_limit(t)} | "
            f"{_fmt_target_value(t)} | {_met(t)} |"
        )
    before_after = before_after_table(results, baseline)
    page = render(results, tables, "\n".join(targets), before_after, baseline)
    (docs / "performance.md").write_text(page)
