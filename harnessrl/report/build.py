"""report.json: what an eval found, per checkpoint and suite, with the comparisons a reader wants.

    {"suites", "seeds", "temperature", ..., "results": [one per checkpoint, base first],
     "comparisons": [each checkpoint against its parent], "rl_effect": {...} | None,
     "training": [RL metrics.jsonl rows], "gates": [verdicts], "incidents": [reward-hacking alarms]}

Each result names its checkpoint by lineage id (`checkpoint`: the weights id that `harnessrl lineage
show` prints; `manifest_hash`: the seal that is its store key) and path, so every number can be
traced to what produced it. The per-episode rows go to episodes.jsonl beside it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from harnessrl.config import EvalConfig
from harnessrl.metrics import read_metrics
from harnessrl.report.metrics import paired_success_diff, suite_metrics

RL_STAGES = ("rl", "long_horizon")
TRAINING_KEYS = ("step", "policy_version", "reward", "success", "malformed", "turns")
# The tool strategy per step (harnessrl/rl/loop.py: strategy_metrics), overall and per suite
# (`<key>/<suite>`): what "What RL changed" draws.
STRATEGY_KEYS = ("parallel_share", "turns_per_solved", "malformed_episodes", "asked")


def checkpoint_result(
    stage: str, checkpoint: str, manifest_hash: str | None, path: str, rows: list[dict], cfg: EvalConfig
) -> dict[str, Any]:
    with_k = len(cfg.seeds) > 1 and cfg.temperature > 0
    # A suite mined from real sources is reported per source too (row_suite): `lookup`, `lookup@email`.
    suites = {
        s: suite_metrics([r for r in rows if r["suite"] == s], with_k) for s in dict.fromkeys(r["suite"] for r in rows)
    }
    pooled = suite_metrics(rows, with_k)
    return {
        "stage": stage,
        "checkpoint": checkpoint,
        "manifest_hash": manifest_hash,
        "path": str(path),
        "suites": suites,
        "all": pooled,
        # The headline numbers, flat, for readers of the first report.json.
        "success": pooled["success"]["value"],
        "malformed": pooled["malformed"]["value"],
        "turns": pooled["turns"]["value"],
    }


def _verdict(diff: dict[str, float]) -> str:
    if diff["pairs"] == 0:
        return "no episodes in common"
    if diff["lo"] > 0:
        return "better"
    if diff["hi"] < 0:
        return "worse"
    return "no clear change"


def comparisons(results: list[dict], episodes: list[dict]) -> list[dict[str, Any]]:
    """Each checkpoint's success against its parent's, paired episode by episode."""
    by_ckpt = lambda r: [e for e in episodes if e["stage"] == r["stage"] and e["checkpoint"] == r["checkpoint"]]
    out = []
    for parent, child in itertools.pairwise(results):
        d = paired_success_diff(by_ckpt(child), by_ckpt(parent))
        out.append(
            {"stage": child["stage"], "parent_stage": parent["stage"], "success_diff": d, "verdict": _verdict(d)}
        )
    return out


def rl_effect(results: list[dict], episodes: list[dict]) -> dict[str, Any] | None:
    """The last RL checkpoint against the checkpoint RL started from: did RL help?"""
    rl = [i for i, r in enumerate(results) if r["stage"] in RL_STAGES]
    if not rl or rl[0] == 0:
        return None
    before, after = results[rl[0] - 1], results[rl[-1]]
    pick = lambda r: [e for e in episodes if e["stage"] == r["stage"] and e["checkpoint"] == r["checkpoint"]]
    d = paired_success_diff(pick(after), pick(before))
    return {"from": before["stage"], "to": after["stage"], "success_diff": d, "verdict": _verdict(d)}


def training_rows(chain_paths: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """RL and long-horizon RL metrics.jsonl rows, numbered on one step axis across both stages."""
    out, offset = [], 0
    for stage, path in chain_paths:
        if stage not in RL_STAGES:
            continue
        rows = read_metrics(Path(path) / "metrics.jsonl")
        for i, r in enumerate(rows):
            keep = {k: v for k, v in r.items() if k in TRAINING_KEYS or k.split("/")[0] in STRATEGY_KEYS}
            out.append({"stage": stage, "global_step": offset + i + 1} | keep)
        offset += len(rows)
    return out


def incident_rows(chain_paths: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The reward-hacking incidents the RL stages of the chain recorded, in chain order."""
    from harnessrl.rewards.monitors import read_incidents

    return [
        {"stage": stage} | inc
        for stage, path in chain_paths
        if stage in RL_STAGES
        for inc in read_incidents(Path(path) / "incidents.jsonl")
    ]


def build_report(
    cfg: EvalConfig,
    data_dir: str,
    results: list[dict],
    episodes: list[dict],
    training: list[dict],
    gates: list[dict],
    incidents: list[dict] | None = None,
) -> dict[str, Any]:
    return {
        "schema": 2,
        "suites": list(dict.fromkeys(s for r in results for s in r["suites"])),  # generated, then per source
        "mix": cfg.mix,
        "seeds": cfg.seeds,
        "temperature": cfg.temperature,
        "num_tasks": cfg.num_tasks,
        "max_turns": cfg.max_turns,
        "max_new_tokens": cfg.max_new_tokens,
        "data": str(data_dir),
        "results": results,
        "comparisons": comparisons(results, episodes),
        "rl_effect": rl_effect(results, episodes),
        "training": training,
        "gates": gates,
        "incidents": incidents or [],
    }
