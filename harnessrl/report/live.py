"""The live report: real-time RL cycle by cycle, from LIVE_DIR/cycles.jsonl and incidents.jsonl.

    LIVE_DIR/report/live.md  live.html  kept_rate.png

Per cycle: the sessions the served checkpoint had, their kept-edit and dissatisfied rates, latency
p50/p95, the gate's verdict, what was promoted, and the incidents. `harnessrl live` rewrites it after
every cycle; `harnessrl live report` redraws it.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from harnessrl.io import atomic_write_text
from harnessrl.serve.session_log import read_log

HEADERS = ["cycle", "served", "sessions", "kept", "dissatisfied", "latency p50 s", "p95 s", "gate", "result",
           "promoted", "incidents"]  # fmt: skip


def _s(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def rows(cycles: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for c in cycles:
        gate = "-" if "gate" not in c else ("pass" if c["result"] == "promoted" else "fail")
        out.append([str(c["cycle"]), c["served"][:12], str(c["sessions"]), _s(c["kept_rate"]),
                    _s(c["dissatisfied_rate"]), _s(c["latency_p50_s"], ".2f"), _s(c["latency_p95_s"], ".2f"), gate,
                    c["result"], (c.get("promoted") or "-")[:12], ", ".join(c.get("incidents") or []) or "-"])  # fmt: skip
    return out


def kept_rate_plot(cycles: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [c["cycle"] for c in cycles]
    ax.plot(xs, [c["kept_rate"] for c in cycles], marker="o", color="#2e7d32", label="kept")
    ax.plot(xs, [c["dissatisfied_rate"] for c in cycles], marker="s", color="#c62828", label="dissatisfied")
    for c in cycles:
        if c["result"] == "promoted":
            ax.axvline(c["cycle"] + 0.5, color="#9e9e9e", lw=0.8, ls="--")
    ax.set_xlabel("cycle (dashed: a promotion after it)")
    ax.set_ylabel("share of the cycle's sessions")
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def write_live_report(live_dir: Path, out: Path | None = None) -> Path:
    from harnessrl.live.cycle import CYCLES, INCIDENTS

    live_dir = Path(live_dir)
    out = out or live_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    cycles = [c for c in read_log(live_dir / CYCLES)[0] if c["result"] != "waiting"]
    incidents, _ = read_log(live_dir / INCIDENTS)
    table = rows(cycles)
    md = ["# Live RL", "", f"{len(cycles)} cycles in {live_dir.resolve()}.", "",
          "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]  # fmt: skip
    md += ["| " + " | ".join(r) + " |" for r in table] + [""]
    md += ["Kept: sessions whose edit the user kept or whose answer they accepted, and nothing reverted or "
           "rejected. Each cycle's figures are of the sessions the served checkpoint had before the cycle trained.",
           "", "![kept rate](kept_rate.png)", "", "## Incidents", ""]  # fmt: skip
    md += [f"- cycle {i['cycle']}: {i['message']}" for i in incidents] or ["None."]
    if cycles:
        kept_rate_plot(cycles, out / "kept_rate.png")
    atomic_write_text(out / "live.md", "\n".join(md) + "\n")
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>" for r in table)
    page = ("<!doctype html><meta charset=utf-8><title>Live RL</title><h1>Live RL</h1><table><tr>"
            + "".join(f"<th>{h}</th>" for h in HEADERS) + f"</tr>{cells}</table><img src=kept_rate.png><h2>Incidents</h2>"
            + "".join(f"<p>cycle {i['cycle']}: {html.escape(i['message'])}</p>" for i in incidents))  # fmt: skip
    atomic_write_text(out / "live.html", page)
    return out
