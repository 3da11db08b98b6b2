"""The report folder: report.json, report.md, report.html with its plots, every number tied to its
checkpoint's lineage id; `harnessrl report RUN_DIR` redraws it from the run's eval checkpoint."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from harnessrl.config import EvalConfig
from harnessrl.report.build import build_report, checkpoint_result
from harnessrl.report.render import headline
from harnessrl.report.write import write_report
from tests.conftest import run_cli

CFG = EvalConfig(mix={"lookup": 1.0, "edit": 1.0}, seeds=[0, 1], num_tasks=10, max_new_tokens=8, temperature=0.7)
SOLVED = {"sft": 2, "rl": 9}  # of 10 tasks per suite and seed: RL clearly helped


def _report(root: Path, cfg: EvalConfig = CFG) -> tuple[dict, list[dict]]:
    results, episodes = [], []
    for stage, solved in SOLVED.items():
        ckpt = root / "checkpoints" / stage
        ckpt.mkdir(parents=True)
        (ckpt / "manifest.json").write_text("{}")
        rows = [{"stage": stage, "checkpoint": f"{stage}-id-0123456789abcdef", "suite": suite, "task_id": f"{suite}{i}",
                 "seed": seed, "success": i < solved, "turns": 1 + i % 4, "tool_calls": 2, "parallel_turns": i % 2,
                 "malformed_turns": int(stage == "sft"), "asked": False, "tokens": 30, "wall_s": 0.2}
                for suite in cfg.mix for seed in cfg.seeds for i in range(10)]  # fmt: skip
        results.append(checkpoint_result(stage, rows[0]["checkpoint"], "seal", str(ckpt), rows, cfg))
        episodes += rows
    training = [{"stage": "rl", "global_step": i + 1, "reward": 0.1 * i, "malformed": 0.3 - 0.1 * i} for i in range(3)]
    return build_report(cfg, "data", results, episodes, training, []), episodes


def test_every_suite_of_a_real_code_eval_gets_its_bar(tmp_path: Path) -> None:
    """recipe=smol evaluates six suites; the success plot once set a bar's alpha below 0 for the fifth."""
    suites = ("lookup", "multi_lookup", "edit", "lint", "bugfix", "swe")
    report, episodes = _report(tmp_path, CFG.model_copy(update={"mix": dict.fromkeys(suites, 1.0)}))
    out = write_report(tmp_path / "out", report, episodes)
    assert (out / "success_by_stage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(report["suites"]) == set(suites)


def test_report_files_are_complete_and_every_number_names_its_checkpoint(tmp_path: Path) -> None:
    report, episodes = _report(tmp_path)
    out = write_report(tmp_path / "out", report, episodes)
    assert report["rl_effect"]["verdict"] == "better"
    assert headline(report)[0].startswith("RL helped: success 0.200 (sft sft-id-01234) → 0.900 (rl rl-id-012345")
    page = (out / "report.html").read_text()
    for img in re.findall(r"<img src='([^']+)'", page):
        assert (out / img).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(re.findall(r"<img ", page)) == 3  # no strategy metrics in these steps: no strategy plot
    # Each value cell links to its checkpoint's manifest and names its id.
    rel = os.path.relpath(tmp_path / "checkpoints" / "rl" / "manifest.json", out.resolve())
    cells = re.findall(rf"<a href='{re.escape(rel)}' title='rl checkpoint rl-id-0123456789abcdef'>([0-9.]+)</a>", page)
    assert cells[:3] == ["0.900", "0.900", "0.000"]  # pass@1, pass@k (the same 9 of 10 under both seeds), malformed
    assert "class='headline better'" in page and "<h2>edit" in page
    md = (out / "report.md").read_text()
    assert "| rl | `rl-id-012345` | 0.900 [" in md and "pass@k" in md
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(report))


def test_harnessrl_report_regenerates_from_a_run_dir(tmp_path: Path) -> None:
    report, episodes = _report(tmp_path)
    eval_ckpt = tmp_path / "kfp" / "eval"
    write_report(eval_ckpt, report, episodes)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    os.symlink(eval_ckpt, run / "checkpoints" / "eval")
    assert run_cli("report", str(run)) == 0
    for name in ("report.json", "report.md", "report.html", "episodes.jsonl"):
        assert (run / "report" / name).read_text() == (eval_ckpt / name).read_text() or name == "report.html"
    assert (run / "report" / "rl_training.png").stat().st_size > 10_000


def test_the_report_lists_the_rl_stages_reward_hacking_incidents(tmp_path: Path) -> None:
    from harnessrl.report.build import incident_rows

    report, episodes = _report(tmp_path)
    rl = tmp_path / "checkpoints" / "rl"
    alarm = {"monitor": "malformed", "value": 0.6, "threshold": 0.5, "examples": ["lookup/r1/x"], "time": 0.0}
    (rl / "incidents.jsonl").write_text(
        "".join(json.dumps(alarm | {"step": s, "message": f"step {s}: hack monitor malformed"}) + "\n" for s in (2, 5))
    )
    report["incidents"] = incident_rows([("sft", str(tmp_path / "checkpoints" / "sft")), ("rl", str(rl))])
    assert [(i["stage"], i["step"]) for i in report["incidents"]] == [("rl", 2), ("rl", 5)]
    out = write_report(tmp_path / "out", report, episodes)
    assert "| rl | malformed | 2 | 2–5 | step 2: hack monitor malformed |" in (out / "report.md").read_text()
    assert "<td>malformed</td><td>2</td><td>2–5</td>" in (out / "report.html").read_text()
    report["incidents"] = []
    quiet = write_report(tmp_path / "quiet", report, episodes)
    assert "No monitor fired." in (quiet / "report.md").read_text()


def test_what_rl_changed_shows_the_tool_strategy_over_steps_and_the_incidents(tmp_path: Path) -> None:
    from harnessrl.report.build import training_rows

    report, episodes = _report(tmp_path)
    rl = tmp_path / "checkpoints" / "rl"
    steps = [{"step": i + 1, "reward": 0.5, "parallel_share": 0.1 + 0.05 * i, "turns_per_solved": 3.0 - 0.1 * i,
              "parallel_share/multi_lookup": 0.2 + 0.05 * i, "turns_per_solved/multi_lookup": 3.0,
              "malformed_episodes/hard_lookup": 0.1 * i, "asked/hard_lookup": 0.0, "grad_norm": 1.0}
             for i in range(10)]  # fmt: skip
    (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    report["training"] = training_rows([("sft", str(tmp_path / "checkpoints" / "sft")), ("rl", str(rl))])
    assert "grad_norm" not in report["training"][0] and report["training"][9]["parallel_share/multi_lookup"] == 0.65
    report["incidents"] = [{"stage": "rl", "step": 7, "monitor": "malformed", "suite": "hard_lookup", "value": 0.6,
                            "threshold": 0.5, "message": "step 7: hack monitor malformed: ...", "examples": []}]  # fmt: skip
    out = write_report(tmp_path / "out", report, episodes)
    md = (out / "report.md").read_text()
    # first five steps: 0.1 .. 0.3, mean 0.2; last five: 0.35 .. 0.55, mean 0.45
    assert "| rl | parallel_share | 0.200 | 0.450 | +0.250 |" in md
    assert "| rl | parallel_share/multi_lookup | 0.300 | 0.550 | +0.250 |" in md
    assert "| rl | malformed_episodes/hard_lookup | 0.200 | 0.700 | +0.500 |" in md
    assert "| rl | malformed on hard_lookup | 1 | 7–7 |" in md
    page = (out / "report.html").read_text()
    assert "<h2>What RL changed</h2>" in page and "<img src='rl_strategy.png'" in page
    assert (out / "rl_strategy.png").stat().st_size > 10_000
