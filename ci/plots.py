#!/usr/bin/env python3
"""Turns the markdown that a GPU run prints (rcb-bench.md, and real_graphs.md from
tests/gpu/real_graphs.py) into PNG charts for docs/:

  update-cost.png        update cost against graph size, one line per path (log-log), from
                         rcb-bench's `### update: N kernel nodes` table;
  host-cost-per-site.png the library's host cost per moved site against graph size, from
                         rcb-bench's `### update: host cost` table;
  real-graphs.png        per PyTorch model: speed-up of the update over re-capture + instantiate,
                         and the update (given the whole table, and given only the moves)
                         against the SetParams floor, from real_graphs.md.

Runs on a developer machine, not in CI (`pip install matplotlib` first):
    python3 ci/plots.py rcb-bench.md [real_graphs.md] [--out docs]
A chart whose table is missing from the input is skipped with a message."""

import argparse
import re
import sys

UNITS = {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}


def tables(path):
    """{section header: (column names, rows of cells)} for every `### ` section with a table."""
    out, header, cols, rows = {}, None, None, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("### "):
                header, cols, rows = line[4:], None, []
            elif header and line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if cols is None:
                    cols = cells
                elif not all(set(c) <= set("-: ") for c in cells):
                    rows.append(cells)
                    out[header] = (cols, rows)
    return out


def find(all_tables, prefix):
    for header, t in all_tables.items():
        if header.startswith(prefix):
            return header, t
    return None, None


def micros(cell):
    """A duration cell ("4.23 µs", "1.78 ms", "527 ns") in µs, or None."""
    m = re.fullmatch(r"([0-9.]+)\s*(ns|µs|us|ms|s)", cell)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def number(cell):
    m = re.fullmatch(r"([0-9.]+)\s*×?", cell)
    return float(m.group(1)) if m else None


def finish_size_chart(plt, fig, ax, ylabel, title, out):
    """What every chart against graph size shares: the log size axis, labels, grid, legend, file."""
    ax.set_xscale("log")
    ax.set_xlabel("graph size (kernel nodes, log scale)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9, wrap=True)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_update_cost(plt, t, title, out):
    cols, rows = t
    n = [int(r[0]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, name in enumerate(cols):
        # Whole-update times only: not the ratios, nor the per-node difference (another unit).
        if name[:3] in ("(a)", "(b)", "(c)", "(d)") and "/" not in name and "per " not in name:
            ys = [micros(r[i]) for r in rows]
            ax.plot(n, ys, marker="o", label=name)
    ax.set_yscale("log")
    finish_size_chart(plt, fig, ax, "host time per update (µs, log scale)", title, out)


def plot_host_cost(plt, t, title, out):
    cols, rows = t
    n = [int(r[0]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, name in enumerate(cols):
        if name == "per moved site":
            # The column before the host cost names the call: "nested update_allocations" etc.
            label = cols[i - 2].replace("nested ", "")
            ax.plot(n, [micros(r[i]) * 1e3 for r in rows], marker="o", label=f"{label}")
    ax.set_ylim(bottom=0)
    finish_size_chart(plt, fig, ax, "library host cost per moved site (ns)", title, out)


def plot_real_graphs(plt, t, title, out):
    cols, rows = t
    at = {c: i for i, c in enumerate(cols)}
    # Horizontal bars: the model names stay readable, first row on top.
    labels = [f"{r[at['model']]}, {r[at['moved']]} moved ({r[at['touched nodes']]} nodes)" for r in rows]
    speedup = [number(r[at["(a)/(d)"]]) or 0 for r in rows]
    floor = [number(r[at["(d)/(c)"]]) or 0 for r in rows]
    # Given only the moves: what the patched XLA calls (a column of runs since commit 52c4b5f).
    moves = [number(r[at["(d′)/(c)"]]) or 0 for r in rows] if "(d′)/(c)" in at else None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 1.8), sharey=True)
    y = list(range(len(rows)))[::-1]
    # On the log scale the bars start at 1× (no speed-up), so their lengths are the log ratios.
    a1.barh(y, [max(v - 1, 0) for v in speedup], left=1, color="tab:blue")
    a1.set_xscale("log")
    a1.set_xlim(left=1)
    a1.set_xlabel("re-capture + instantiate ÷ update_allocations (×, log scale from 1×)")
    a1.set_title("speed-up of the update over re-capturing", fontsize=9)
    bars = [(floor, "update_allocations (the whole table)", "tab:orange")]
    if moves:
        bars.append((moves, "move_allocations (only the moves: what XLA calls)", "tab:green"))
    h = 0.8 / len(bars)
    for k, (xs, label, color) in enumerate(bars):
        ys = [yi + 0.4 - h * (k + 0.5) for yi in y]
        a2.barh(ys, xs, height=h, color=color, label=label)
        for yi, xv in zip(ys, xs):
            a2.annotate(f" {xv:g}×", (xv, yi), ha="left", va="center", fontsize=7)
    a2.axvline(1.0, color="black", linewidth=0.8)
    a2.set_xlim(left=0)
    a2.set_xlabel("update ÷ SetParams floor of the same nodes (×; 1 = the driver's floor)")
    a2.set_title("the update against the driver's floor (steady state)", fontsize=9)
    a1.set_yticks(y)
    a1.set_yticklabels(labels, fontsize=8)
    for yi, xv in zip(y, speedup):
        a1.annotate(f" {xv:g}×", (xv, yi), ha="left", va="center", fontsize=7)
    fig.suptitle(title, fontsize=9, wrap=True)
    # Below the charts, where it covers no bar.
    fig.legend(*a2.get_legend_handles_labels(), loc="lower right", ncol=len(bars), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", help="rcb-bench.md and/or real_graphs.md of one GPU run")
    p.add_argument("--out", default="docs", help="folder for the PNGs (default: docs)")
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = {}
    for path in args.inputs:
        found.update(tables(path))
    charts = [
        ("update: N kernel nodes", plot_update_cost, "update-cost.png"),
        ("update: host cost", plot_host_cost, "host-cost-per-site.png"),
        ("real graphs: PyTorch-captured", plot_real_graphs, "real-graphs.png"),
    ]
    for prefix, plot, name in charts:
        header, t = find(found, prefix)
        if t is None:
            print(f"{name}: skipped (no `### {prefix}` table in the input)", file=sys.stderr)
            continue
        plot(plt, t, header, f"{args.out}/{name}")
        print(f"{args.out}/{name}: from `### {header}`")


if __name__ == "__main__":
    main()
