"""Writing a report folder, and regenerating one from a run directory.

    report.json  episodes.jsonl  report.md  report.html  success_by_stage.png  rl_training.png
    turns_distribution.png

Everything but report.json and episodes.jsonl is drawn from those two, so `harnessrl report RUN_DIR`
redraws a run's report without running anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harnessrl.io import atomic_write_text, write_json
from harnessrl.report.plots import write_plots
from harnessrl.report.render import html_page, markdown

REPORT, EPISODES = "report.json", "episodes.jsonl"


def write_report(out: Path, report: dict[str, Any], episodes: list[dict[str, Any]]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / REPORT, report)
    atomic_write_text(out / EPISODES, "".join(json.dumps(e, sort_keys=True) + "\n" for e in episodes))
    write_plots(report, episodes, out)
    atomic_write_text(out / "report.md", markdown(report))
    atomic_write_text(out / "report.html", html_page(report, out.resolve()))
    return out


def read_report(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    report = json.loads((folder / REPORT).read_text())
    if "schema" not in report:
        raise ValueError(f"{folder / REPORT}: written before per-suite intervals; re-run the eval stage")
    lines = (folder / EPISODES).read_text().splitlines() if (folder / EPISODES).is_file() else []
    return report, [json.loads(line) for line in lines if line.strip()]


def find_run_report(run_dir: Path) -> Path:
    """The folder holding a run's report.json: its eval checkpoint, or, when a gate failed the eval
    stage (no checkpoint then), the report the stage kept in the run's state folder."""
    if not (run_dir / "run.json").is_file() and not (run_dir / "summary.json").is_file():
        raise FileNotFoundError(f"{run_dir}: not a harnessrl run directory (no run.json or summary.json)")
    done = run_dir / "checkpoints" / "eval"
    if (done / REPORT).is_file():
        return done
    kept = sorted((run_dir / "state" / "eval").glob(f"*/report/{REPORT}"), key=lambda p: p.stat().st_mtime)
    if kept:
        return kept[-1].parent
    raise FileNotFoundError(f"{run_dir}: no eval report (checkpoints/eval/{REPORT} is missing; was eval disabled?)")


def regenerate(run_dir: Path, out: Path | None = None) -> Path:
    """Redraw a run's report into RUN_DIR/report (or `out`)."""
    report, episodes = read_report(find_run_report(run_dir))
    return write_report(out or run_dir / "report", report, episodes)
