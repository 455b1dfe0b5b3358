#!/usr/bin/python3
"""Draws one traced training step of a job as a pipeline timeline: one row per stage (and
replica), forward / backward / idle coloured, from the Chrome trace JSON of `dapplectl trace`.

    scripts/plot_trace.py trace.json timeline.png [--step N] [--title TEXT]

Without --step it draws the newest step that every rank traced. Needs Debian's
python3-matplotlib (/usr/bin/python3).
"""
import argparse
import json
import sys

COLOURS = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "optimizer": "#8172B2",
    "allreduce": "#CCB974",
    "send": "#64B5CD",
    "recv": "#DDDDDD",
    "idle": "#E5AE9F",
}
ORDER = ["forward", "backward", "optimizer", "allreduce", "send", "idle"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except OSError as e:
        sys.exit(f"plot_trace.py: cannot read {args.trace}: {e.strerror}")
    except ValueError as e:
        sys.exit(f"plot_trace.py: {args.trace} is not a trace (JSON from `dapplectl trace JOB -o "
                 f"FILE`): {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        sys.exit(f"plot_trace.py: {args.trace} has no traceEvents list: not a trace from "
                 "`dapplectl trace JOB -o FILE`")
    events = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    names = {}
    for e in trace["traceEvents"]:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    ranks = sorted({(e["pid"], e["tid"]) for e in events})
    steps_by_rank = {r: set() for r in ranks}
    for e in events:
        s = e.get("args", {}).get("step")
        if s is not None:
            steps_by_rank[(e["pid"], e["tid"])].add(int(s))
    common = set.intersection(*steps_by_rank.values()) if ranks else set()
    if not common:
        sys.exit("plot_trace.py: no step was traced by every rank")
    step = args.step or max(common)
    if step not in common:
        sys.exit(f"plot_trace.py: step {step} was not traced by every rank; traced: "
                 f"{sorted(common)}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.exit("plot_trace.py: needs python3-matplotlib (apt-get install python3-matplotlib)")
    chosen = [e for e in events if e.get("args", {}).get("step") == step
              and e.get("cat") in COLOURS]
    t0 = min(e["ts"] for e in chosen)
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(ranks) + 1.6))
    labels = []
    for row, rank in enumerate(ranks):
        mine = [e for e in chosen if (e["pid"], e["tid"]) == rank]
        for cat in ["recv", "idle", "send", "allreduce", "optimizer", "forward", "backward"]:
            spans = [((e["ts"] - t0) / 1000.0, e["dur"] / 1000.0) for e in mine
                     if e["cat"] == cat and e["dur"] > 0]
            if spans:
                ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=COLOURS[cat],
                               edgecolors="white", linewidth=0.3)
        for e in mine:
            if e["cat"] in ("forward", "backward") and e["dur"] > 0:
                mb = e.get("args", {}).get("micro_batch")
                if mb is not None and mb >= 0:
                    ax.text((e["ts"] - t0 + e["dur"] / 2) / 1000.0, row, str(mb),
                            ha="center", va="center", fontsize=7, color="white")
        pid, tid = rank
        labels.append(names.get(pid, f"stage {pid}") + (f" r{tid}" if len(
            {t for p, t in ranks if p == pid}) > 1 else ""))
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the step began")
    ax.set_title(args.title or f"step {step}")
    ax.legend(handles=[Patch(color=COLOURS[c], label=c) for c in ORDER],
              loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(ORDER), frameon=False)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}: step {step}, {len(ranks)} ranks")


if __name__ == "__main__":
    main()
