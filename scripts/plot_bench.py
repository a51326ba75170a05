#!/usr/bin/env python3
"""Plots latency percentiles against load from the JSON of `agentmux bench sweep`.

    python3 scripts/plot_bench.py docs/bench/sweep.json docs/bench/latency-vs-load.png

One panel per latency (chat -> first stream_event, chat -> result); x is the delivered frames
per second each paced load produced; baseline dashed, agentmux solid. Installs matplotlib into
.deps/plot-venv when it is missing.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyvenv  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pyvenv.ensure("matplotlib", "plot-venv")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1]) as f:
        report = json.load(f)
    rows = [r for r in report["rows"] if r["agentmux"].get("offered_turns_per_sec")]
    if not rows:
        sys.exit("no paced rows: pass the JSON of `agentmux bench sweep`")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colors = {"p50_us": "tab:green", "p90_us": "tab:orange", "p99_us": "tab:red"}
    for ax, (metric, title) in zip(
        axes, [("first_token", "chat → first stream_event"), ("result", "chat → result")]
    ):
        for server, style in [("baseline", "--"), ("agentmux", "-")]:
            points = [r[server] for r in rows if r.get(server)]
            if not points:
                continue
            xs = [p["delivered_fps"] / 1000 for p in points]
            for pct, color in colors.items():
                ys = [max(p[metric][pct], 1) / 1000 for p in points]
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{server} {pct[:3]}")
        ax.set_title(title)
        ax.set_xlabel("delivered frames/s (thousands)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (ms, log)")
    axes[1].legend(fontsize=8)
    m = report["machine"]
    p = report["params"]
    fig.suptitle(
        f"{p['sessions']} sessions on {p['sockets']} sockets, paced at 10-90 % of agentmux's peak"
        f" — {m['cores']} cores, {m['cpu']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
