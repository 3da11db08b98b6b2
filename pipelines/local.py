"""Run a recipe's DAG on this machine through kfp's own local runner, and compile or submit it.

`kfp.local` with SubprocessRunner executes the very pipeline that compiles for the cluster: each
stage runs as a lightweight component in a subprocess, with kfp's cache in a pipeline root shared by
all runs (so a re-run with nothing changed is served from the cache).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from harnessrl.config import Config
from harnessrl.data.build import build as build_data
from harnessrl.data.build import check_built_from, data_folder
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.io import atomic_write_text, write_json
from harnessrl.lineage.manifest import chain, code_hash
from harnessrl.stage import KEY_METRIC
from pipelines.dag import DataSource, build_pipeline
from pipelines.routing import enabled_stages

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COMPONENT_TO_STAGE = {"evaluate": "eval", "long-horizon": "long_horizon"}
STAGE_LINE = re.compile(r"^\s*\[(data|base|cpt|sft|rl|long_horizon|eval)\] ")


@dataclass
class StageStatus:
    stage: str
    state: str = "pending"  # running | done | cached | failed
    started: float = 0.0
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)


class Progress(logging.Filter):
    """Turns kfp.local's log records into one line per stage event, with elapsed time.

    kfp logs through the root logger; a filter on that logger sees each record first and can drop
    it. kfp's own wording goes to `kfp.log` in the run directory.
    """

    def __init__(self, log_path: Path, t0: float, out: TextIO) -> None:
        super().__init__()
        self.t0, self.out = t0, out
        self.log = log_path.open("a")
        self.stages: dict[str, StageStatus] = {}

    def _say(self, text: str) -> None:
        self.out.write(f"[{time.time() - self.t0:7.1f}s] {text}\n")
        self.out.flush()

    # kfp prints each task's output (our stage's lines among kfp's executor chatter) to stdout;
    # `write` receives it through redirect_stdout, shows the stages' own lines, logs all.
    def write(self, text: str) -> int:
        self.log.write(ANSI.sub("", text))
        for line in text.splitlines():
            if STAGE_LINE.match(line):
                self.out.write(f"{'':10}{line.strip()}\n")
        return len(text)

    def flush(self) -> None:
        self.log.flush()
        self.out.flush()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = ANSI.sub("", record.getMessage())
        self.log.write(msg + "\n")
        self.log.flush()
        if m := re.match(r"Executing task '?([\w-]+)'?", msg):
            st = self._status(m.group(1))
            st.state, st.started = "running", time.time()
            self._say(f"▶ {st.stage:<13} started")
        elif m := re.match(r"Task '?([\w-]+)'? cache hit", msg):
            st = self._status(m.group(1))
            st.state = "cached"
            self._say(f"↺ {st.stage:<13} cached")
        elif m := re.match(r"Task '?([\w-]+)'? finished with status (\w+)", msg):
            st = self._status(m.group(1))
            st.seconds = time.time() - st.started
            st.state = "done" if m.group(2) == "SUCCESS" else "failed"
            self._say(f"{'✓' if st.state == 'done' else '✗'} {st.stage:<13} {st.state} in {st.seconds:.1f}s")
        elif m := re.match(r"Task '?([\w-]+)'? outputs:", msg):
            st = self._status(m.group(1))
            st.outputs = re.findall(r"uri='([^']+)'", msg)
            for uri in st.outputs:
                self._say(f"  {st.stage:<13} → {uri}")
        return record.levelno >= logging.WARNING and "Task" not in msg  # keep real warnings visible

    def _status(self, task: str) -> StageStatus:
        stage = COMPONENT_TO_STAGE.get(task, task)
        return self.stages.setdefault(stage, StageStatus(stage))


def ensure_data(cfg: Config, root: Path) -> tuple[Path, str]:
    """The data config's own folder (`data/<name>-<config hash>`), built deterministically if absent,
    and its DVC md5. A folder that is not what its name says (edited by hand, or built by other code)
    is refused (ConfigError), never silently used or replaced."""
    data_dir = data_folder(cfg.data, root)
    if not data_dir.exists():
        print(f"data: building {data_dir} (seed {cfg.data.seed})", flush=True)
        build_data(cfg.data, data_dir, progress=True, store=cfg.store)
    check_built_from(cfg.data, data_dir)
    return data_dir.resolve(), dvc_dir_md5(data_dir)


RUN_FILE = "run.json"


def run_local(cfg: Config, run_dir: Path, pipeline_root: Path, data_root: Path, overrides: list[str]) -> list[dict]:
    """Execute the DAG; returns one summary row per stage, also written to run_dir/summary.json.

    Running again into the same run directory resumes it: finished stages come from kfp's cache, and
    a killed stage continues from the training state it saved under run_dir/state.
    """
    from kfp import local

    data_dir, data_md5 = ensure_data(cfg, data_root)  # refuses stale data before the run dir exists
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(
        run_dir / RUN_FILE,
        {
            "recipe": cfg.name,
            "overrides": overrides,
            "pipeline_root": str(pipeline_root.resolve()),
            "data_root": str(data_root.resolve()),
        },
    )
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    # The data step copies the folder into the pipeline root, and every stage reads that copy.
    pipeline = build_pipeline(cfg, DataSource(md5=data_md5, folder=str(data_dir)), code_hash())

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        enable_caching=True,
        raise_on_error=True,
    )
    t0 = time.time()
    progress = Progress(run_dir / "kfp.log", t0, sys.stdout)
    root_logger = logging.getLogger()
    root_logger.addFilter(progress)
    print(f"run: {cfg.name} → {run_dir}  (stages: {' → '.join(enabled_stages(cfg))})", flush=True)
    # Inherited by the task subprocesses (process env is not part of kfp's cache key), and put back
    # afterwards, so a later run or stage in this process never writes into this run's state.
    saved_root = os.environ.get("HARNESSRL_STATE_ROOT")
    os.environ["HARNESSRL_STATE_ROOT"] = str((run_dir / "state").resolve())
    try:
        with contextlib.redirect_stdout(progress), warnings.catch_warnings():
            # Scheduling settings (display name, node selectors, ...) are for the cluster; kfp.local
            # warns that it ignores them, which is expected here.
            warnings.filterwarnings("ignore", message=".*no effect in the current local runner")
            result = pipeline()
    finally:
        if saved_root is None:
            del os.environ["HARNESSRL_STATE_ROOT"]
        else:
            os.environ["HARNESSRL_STATE_ROOT"] = saved_root
        root_logger.removeFilter(progress)
        progress.log.close()
    final = Path(result.output.path if hasattr(result, "output") else result.path)

    rows = []
    for path, manifest in reversed(chain(final)):
        st = progress.stages.get(manifest["stage"], StageStatus(manifest["stage"], "cached"))
        rows.append(
            {
                "stage": manifest["stage"],
                "state": st.state,
                "seconds": round(st.seconds, 2),
                "metric": KEY_METRIC[manifest["stage"]],
                "value": manifest["metrics"].get(KEY_METRIC[manifest["stage"]]),
                "checkpoint": str(path),
                "id": manifest["id"][:12],
            }
        )
        link = run_dir / "checkpoints" / manifest["stage"]
        link.parent.mkdir(exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(path, link)
    write_json(run_dir / "summary.json", {"recipe": cfg.name, "seconds": round(time.time() - t0, 2), "stages": rows})
    if (run_dir / "checkpoints" / "eval").exists():
        from harnessrl.report.write import regenerate

        print(f"report: {regenerate(run_dir) / 'report.html'}", flush=True)
    return rows


def read_run(run_dir: Path) -> dict:
    """What `harnessrl run` recorded about a run directory, for --resume."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: not a harnessrl run directory (no {RUN_FILE})")
    return json.loads(path.read_text())


def print_summary(rows: list[dict], total_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"harnessrl run: {total_s:.1f}s")
    for col in ("stage", "state", "time", "key metric", "checkpoint"):
        table.add_column(col)
    for r in rows:
        value = r["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        table.add_row(r["stage"], r["state"], f"{r['seconds']:.1f}s", f"{r['metric']}={shown}", r["checkpoint"])
    Console(width=200).print(table)
