"""What the pipeline costs on top of the stages' own work, measured side by side in one run.

    python bench/pipeline_overhead.py            # smoke recipe for overheads + a full default run
    python bench/pipeline_overhead.py --no-full  # skip the full uncached default run (~2 min)

Prints:
  1. compile time of the GPU recipe (qwen_coder_7b), side by side: from a clean checkout (its tracked
     files only, no data folder) and with the tiny recipe's data built there. Compile builds nothing,
     so both are the same. Each is composing the config and compiling, in this process (median of 5),
     and one `harnessrl compile` from the shell, whose Python start and imports are shown apart;
  2. per stage: wall time under kfp.local (subprocess) against calling the same stage function
     directly in this process, and the difference: the local runner's overhead;
  3. a cached re-run of the whole recipe, as `harnessrl run` from the shell;
  4. the wall time of a full uncached run of the default recipe.
Targets: compile < 1 s (issues 2 and 15); cached re-run < 5 s; full default recipe <= 15 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import components.base
import components.cpt
import components.evaluate
import components.long_horizon_rl
import components.rl
import components.sft
from harnessrl.config import compose
from harnessrl.stage import run_stage
from pipelines.local import ensure_data
from pipelines.remote import compile_pipeline
from pipelines.routing import enabled_stages, stage_slice

WORK = {
    "base": components.base.work,
    "cpt": components.cpt.work,
    "sft": components.sft.work,
    "rl": components.rl.work,
    "long_horizon": components.long_horizon_rl.work,
    "eval": components.evaluate.work,
}


REPO = Path(__file__).resolve().parent.parent


def harnessrl(*args: str, cwd: Path | None = None) -> float:
    """Wall time of one `harnessrl` command, run as a user would run it."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harnessrl.cli", *args], check=True, stdout=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - t0


def clean_checkout(dest: Path) -> Path:
    """The repo's tracked files (as they are in the working tree) and nothing else: no data folders."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for rel in files.decode().split("\0"):
        if rel and (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def compile_times(checkout: Path, out: Path) -> tuple[float, float]:
    """(compose + compile in this process, median of 5; one `harnessrl compile` from the shell) for
    qwen_coder_7b in `checkout`."""
    times = []
    for i in range(5):
        t0 = time.perf_counter()
        compile_pipeline(compose(["recipe=qwen_coder_7b"]), out / f"q{i}.yaml", checkout)
        times.append(time.perf_counter() - t0)
    cli = harnessrl("compile", "recipe=qwen_coder_7b", "-o", str(out / "cli.yaml"), cwd=checkout)
    return statistics.median(times), cli


def import_time() -> float:
    """Wall time of a Python process that only imports what `harnessrl compile` imports (median of 3)."""
    code = "import harnessrl.cli, pipelines.remote, kfp.kubernetes"
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-full", action="store_true", help="skip the full uncached run of the default recipe")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    data = f"data.dir={tmp / 'data'}"

    # 1. compile the GPU recipe: from a clean checkout, then with the tiny recipe's data built in it
    checkout = clean_checkout(tmp / "checkout")
    (tmp / "ir").mkdir()
    clean = compile_times(checkout, tmp / "ir")
    ensure_data(compose([]), checkout)
    with_tiny = compile_times(checkout, tmp / "ir")

    # 2. per-stage overhead of kfp.local on the smoke recipe (uncached: a fresh pipeline root)
    smoke = ["recipe=tiny_smoke", data]
    harnessrl("run", *smoke, "--output-dir", str(tmp / "smoke"), "--pipeline-root", str(tmp / "kfp-smoke"))
    kfp_rows = {r["stage"]: r for r in json.loads((tmp / "smoke" / "summary.json").read_text())["stages"]}
    cfg = compose(smoke)
    data_dir, md5 = ensure_data(cfg, tmp)
    direct, prev = {}, None
    for stage in enabled_stages(cfg):
        out = tmp / "direct" / stage
        t0 = time.perf_counter()
        run_stage(
            stage,
            WORK[stage],
            json.dumps(stage_slice(cfg, stage)),
            str(data_dir),
            md5,
            str(prev) if prev else None,
            str(out),
        )
        direct[stage] = time.perf_counter() - t0
        prev = out

    # 3. cached re-run, from the shell
    cached_s = harnessrl("run", *smoke, "--output-dir", str(tmp / "smoke2"), "--pipeline-root", str(tmp / "kfp-smoke"))

    # 4. full uncached default recipe
    full_s = None
    if not args.no_full:
        full_s = harnessrl("run", data, "--output-dir", str(tmp / "full"), "--pipeline-root", str(tmp / "kfp-full"))

    print("\n== pipeline overhead (tiny_smoke for per-stage numbers) ==")
    print(f"{'stage':<14}{'kfp.local s':>12}{'direct s':>10}{'overhead s':>12}{'ratio':>8}")
    for stage, d in direct.items():
        k = kfp_rows[stage]["seconds"]
        print(f"{stage:<14}{k:>12.2f}{d:>10.2f}{k - d:>12.2f}{k / d:>7.1f}x")
    k_total, d_total = sum(r["seconds"] for r in kfp_rows.values()), sum(direct.values())
    print(f"{'total':<14}{k_total:>12.2f}{d_total:>10.2f}{k_total - d_total:>12.2f}{k_total / d_total:>7.1f}x")
    imports = import_time()
    print("\n== compile qwen_coder_7b ==        compose + compile (median of 5)   harnessrl compile (shell)")
    for name, (inproc, cli) in (("clean checkout", clean), ("tiny data built", with_tiny)):
        ok = "OK" if inproc < 1 else "MISS"
        print(f"{name:<34}{inproc:8.3f} s   target < 1 s  {ok}{'':6}{cli:8.3f} s")
    ratio = f"{with_tiny[0] / clean[0]:8.2f}x{'':23}{with_tiny[1] / clean[1]:8.2f}x"
    print(f"{'ratio (tiny data built / clean)':<34}{ratio}")
    label = "of it, Python start + imports"
    print(f"{label:<34}{'':31}{imports:8.3f} s  (kfp with the Kubernetes client, Hydra, pydantic)\n")
    print(f"cached re-run (harnessrl run)  {cached_s:8.3f} s   target < 5 s    {'OK' if cached_s < 5 else 'MISS'}")
    if full_s is not None:
        print(f"full default recipe, uncached  {full_s:8.1f} s   target <= 900 s {'OK' if full_s <= 900 else 'MISS'}")


if __name__ == "__main__":
    main()
