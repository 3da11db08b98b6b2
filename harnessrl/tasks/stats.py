"""`harnessrl tasks stats`: what a suite directory or data folder holds, and what mining it cost."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from harnessrl.tasks.task import SPLITS, TaskFileError, load_tasks


def stats_lines(folder: Path) -> list[str]:
    """Tasks per suite, source and split; then per source and suite, the candidates mined, the kept,
    the drops by reason and the expert's success at validation (from mining.json)."""
    if not (folder / "tasks").is_dir():
        raise TaskFileError(f"{folder}: no tasks/ folder; give a suite directory or a data folder")
    counts: Counter[tuple[str, str, str]] = Counter()
    for split in SPLITS:
        for t in load_tasks(folder / "tasks" / f"{split}.jsonl"):
            counts[(t.suite, t.source or "generated", split)] += 1
    lines = [f"{'suite':<14}{'source':<20}{'train':>7}{'heldout':>9}"]
    for suite, source in sorted({(s, src) for s, src, _ in counts}):
        lines.append(
            f"{suite:<14}{source:<20}{counts[(suite, source, 'train')]:>7}{counts[(suite, source, 'heldout')]:>9}"
        )
    mining = folder / "mining.json"
    if mining.is_file():
        lines += ["", f"{'source':<20}{'suite':<14}{'candidates':>11}{'kept':>6}{'expert':>8}  dropped"]
        for source, suites in sorted(json.loads(mining.read_text()).items()):
            for suite, s in sorted(suites.items()):
                expert = "-" if s["expert_success"] is None else f"{s['expert_success']:.3f}"
                drops = ", ".join(f"{n} {why}" for why, n in s["dropped"].items()) or "none"
                lines.append(f"{source:<20}{suite:<14}{s['candidates']:>11}{s['kept']:>6}{expert:>8}  {drops}")
    return lines
