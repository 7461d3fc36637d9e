"""Tables, disagreements and the plot of bench/engines.py: markdown with the ratio corral / best
other engine for every figure, and a PNG of per-step mask times per engine."""

from __future__ import annotations

import numpy as np
from engine_store import median_ms

FIGURES = (  # key, title, unit scale, unit
    ("compile", "compile", 1e3, "ms"),
    ("first_mask", "time to first mask", 1e3, "ms"),
    ("mask_mean", "mask per step, mean", 1e6, "us"),
    ("mask_p50", "mask per step, p50", 1e6, "us"),
    ("mask_p99", "mask per step, p99", 1e6, "us"),
    ("mask_max", "mask per step, max", 1e6, "us"),
    ("advance_mean", "advance per step, mean", 1e6, "us"),
    ("rss", "memory (RSS growth)", 1 / 2**20, "MiB"),
)


def figures(results: list[dict]) -> dict | None:
    """Figures of one engine over one or more `measure` results (status ok): medians of
    compile, first mask and RSS growth; mask and advance times pooled over every step."""
    ok = [r for r in results if r.get("status") == "ok"]
    if not ok:
        return None
    masks = np.concatenate([r["mask_s"] for r in ok] + [np.zeros(0)])
    advances = np.concatenate([r["advance_s"] for r in ok] + [np.zeros(0)])
    pick = (lambda f: f(masks)) if masks.size else (lambda f: float("nan"))
    return {
        "compile": float(np.median([r["compile_s"] for r in ok])),
        "first_mask": float(np.median([r["first_mask_s"] for r in ok])),
        "mask_mean": pick(np.mean),
        "mask_p50": pick(np.median),
        "mask_p99": pick(lambda a: np.percentile(a, 99)),
        "mask_max": pick(np.max),
        "advance_mean": float(np.mean(advances)) if advances.size else float("nan"),
        "rss": float(np.median([r["rss_growth"] for r in ok])),
    }


def _ratio(row: dict, ours: str, engines: list[str]) -> str:
    """`row[ours]` / the best (lowest) value of the engines that are not corral's."""
    others = [
        row[e] for e in engines if not e.startswith("corral") and isinstance(row.get(e), float)
    ]
    if not isinstance(row.get(ours), float) or not others or min(others) <= 0:
        return "-"
    return f"{row[ours] / min(others):.2f}"


def figure_tables(
    rows: dict[str, dict[str, dict | str]], engines: list[str], notes: dict[str, str] | None = None
) -> str:
    """One markdown table per figure: a row per grammar, a column per engine (or its status),
    and per corral engine (corral, corral-lazy) its value / the best other engine's (lower is
    better for every figure). `notes`: figure key -> a note added to that table's heading (how
    its figure was taken)."""
    ours = [e for e in engines if e.startswith("corral")]
    out = []
    for key, title, scale, unit in FIGURES:
        note = (notes or {}).get(key)
        note = f"; {note}" if note else ""
        last = ", ".join(f"{e} / best other" for e in ours)
        out.append(f"\n**{title}** ({unit}; last columns: {last}{note})\n")
        ratio_heads = " | ".join(f"{e} ratio" for e in ours)
        out.append("| grammar | " + " | ".join(engines) + f" | {ratio_heads} |")
        out.append("|---" * (len(engines) + len(ours) + 1) + "|")
        for grammar, by_engine in rows.items():
            values, cells = {}, []
            for engine in engines:
                got = by_engine.get(engine)
                if isinstance(got, dict) and np.isfinite(got[key]):
                    values[engine] = got[key]
                    cells.append(f"{got[key] * scale:.3g}")
                else:
                    cells.append(got if isinstance(got, str) else "-")
            ratios = " | ".join(_ratio(values, e, engines) for e in ours)
            out.append(f"| {grammar} | " + " | ".join(cells) + f" | {ratios} |")
    return "\n".join(out)


def coverage_table(cells: dict[str, dict[str, dict]], engines: list[str]) -> str:
    """Per subset and engine (cells of `engine_store.coverage_cells`): compiled, of which exact
    and narrowed (corral's compiles with narrowed bounds, docs/subsets.md; every other engine's
    are counted exact) / refused / crashed / timeout / error / not run, median compile ms, valid
    instances accepted / fed, invalid instances accepted / fed (of the compiled schemas), and
    the time caps used."""
    out = [
        "| subset | engine | compiled | exact | narrowed | refused | crashed | timeout | error "
        "| not run | median compile ms | valid accepted | invalid accepted | cap s |",
        "|---" * 14 + "|",
    ]
    for subset, by_engine in cells.items():
        for engine in engines:
            c = by_engine.get(engine)
            if not c:
                continue
            caps = ",".join(f"{cap:g}" for cap in c["caps_s"]) or "-"
            out.append(
                f"| {subset} | {engine} | {c['ok']} | {c['ok'] - c['narrowed']} | "
                f"{c['narrowed']} | {c['refused']} | {c['crashed']} | "
                f"{c['timeout']} | {c['error']} | {c['missing']} | {median_ms(c):.3g} | "
                f"{c['valid_ok']}/{c['valid']} | {c['invalid_ok']}/{c['invalid']} | {caps} |"
            )
    return "\n".join(out)


def plot(step_times: dict[str, np.ndarray], path) -> None:
    """A PNG of the per-step mask time distributions (log scale, microseconds) per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, t in step_times.items() if len(t)]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.boxplot([np.asarray(step_times[n]) * 1e6 for n in names], whis=(1, 99), sym=".")
    axes.set_xticks(range(1, len(names) + 1), names)
    axes.set_yscale("log")
    axes.set_ylabel("mask time per step (us, log)")
    axes.set_title("per-step mask time along valid walks (whiskers p1-p99)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
