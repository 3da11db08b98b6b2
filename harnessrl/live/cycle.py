"""One real-time RL cycle: collect, train on-policy, gate, promote. It reads top to bottom:

    collect   the sessions served since the last cycle, joined with their feedback (sessions.py)
    monitor   the hack alarms on them (monitors.py); an alarm writes an incident and, unless
              live.train_on_alarm, the cycle trains nothing
    train     stages.rl's own update (trainer.LocalTrainer: the same objective, clipping and truncated
              importance weights) on exactly the logged prompt and completion ids, with the logged
              behaviour logprobs; each session's reward is its signals' weighted sum, and its
              advantage that reward against the cycle's mean (one group: the cycle)
    save      the candidate, with a lineage manifest whose parent is the served checkpoint and whose
              data is the cycle's sessions and feedback (cycles/NNNN/, hashed as DVC hashes a folder)
    gate      the eval stage's regression gates (live.gates) on stages.eval's held-out suites,
              candidate against the served checkpoint, in the harness
    promote   on a pass, served.json names the candidate and `serve` hot-swaps to it; on a fail the
              served one stays and an incident says why

Everything a cycle decided is one row of cycles.jsonl; state.json remembers which sessions are used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harnessrl.config import Config
from harnessrl.io import atomic_dir, write_json
from harnessrl.live.feedback import Dissatisfaction
from harnessrl.live.monitors import alarms
from harnessrl.live.sessions import Collected, Session, collect, malformed, session_reward
from harnessrl.serve.engine import checkpoint_version
from harnessrl.serve.server import served_checkpoint, serving_version, set_served
from harnessrl.serve.session_log import AppendLog

STATE, CYCLES, INCIDENTS = "state.json", "cycles.jsonl", "incidents.jsonl"


def read_state(live_dir: Path) -> dict[str, Any]:
    path = Path(live_dir) / STATE
    state = json.loads(path.read_text()) if path.is_file() else {}
    return {"cycle": 0, "consumed": {}, "results": {}} | state


def session_figures(sessions: list[Session], dissatisfied: Dissatisfaction) -> dict[str, Any]:
    """What the report shows per cycle: how the served checkpoint did with its users."""
    n = max(1, len(sessions))
    kinds = [Counter(e["type"] for e in s.events) for s in sessions]
    kept = sum(k["edit_kept"] + k["accepted"] > 0 and k["edit_reverted"] + k["rejected"] == 0 for k in kinds)
    unhappy = sum(any(e["type"] == "followup" and dissatisfied(e) for e in s.events) for s in sessions)
    latencies = sorted(t["total_s"] for s in sessions for t in s.turns)

    def pct(q: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None

    return {"sessions": len(sessions), "turns": len(latencies), "kept_rate": kept / n,
            "dissatisfied_rate": unhappy / n, "latency_p50_s": pct(0.5), "latency_p95_s": pct(0.95)}  # fmt: skip


def check_trainable(cfg: Config) -> None:
    """Refuse what the live cycle would not do as the config reads: it trains on one rank, in its pod."""
    rl = cfg.stages.rl
    if rl.trainer_world_size > 1:
        raise ValueError(f"stages.rl.trainer_world_size={rl.trainer_world_size}: the live cycle trains on one rank "
                         "(a multi-rank live trainer is not built); for `harnessrl live` override "
                         "stages.rl.trainer_world_size=1 ~stages.rl.placement.trainer")  # fmt: skip


@contextlib.contextmanager
def cycle_lock(live_dir: Path):
    """One cycle at a time per live folder: two would train the same sessions and race on a candidate."""
    fd = os.open(live_dir / ".cycle.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{live_dir}: another live cycle is running (it holds .cycle.lock)") from None
        yield
    finally:
        os.close(fd)


def run_cycle(cfg: Config, live_dir: Path, data_dir: Path, now: float | None = None) -> dict[str, Any]:
    """One cycle; returns its row (also appended to cycles.jsonl, but for `waiting`). `result` is one
    of: waiting (nothing used up), alarm, nothing_to_learn, promoted, rejected."""
    live_dir, data_dir = Path(live_dir), Path(data_dir)
    check_trainable(cfg)
    live_dir.mkdir(parents=True, exist_ok=True)
    with cycle_lock(live_dir):
        return _run_cycle(cfg, live_dir, data_dir, now or time.time())


def _run_cycle(cfg: Config, live_dir: Path, data_dir: Path, now: float) -> dict[str, Any]:
    state = read_state(live_dir)
    served = served_checkpoint(live_dir)
    if served is None:
        raise ValueError(f"{live_dir}: nothing served yet (no served.json); start `harnessrl serve` first")
    served_version = checkpoint_version(served)
    consumed = dict(state["consumed"])
    live, rl = cfg.live, cfg.stages.rl
    row: dict[str, Any] = {"cycle": state["cycle"] + 1, "time": time.time(), "served": served_version}
    serving = serving_version(live_dir)
    if serving is not None and serving != served_version:
        # Training from a checkpoint nobody serves would drop every real session as off-policy.
        return row | {"result": "waiting", "cycle": state["cycle"], "sessions": 0, "waiting": 0,
                      "reason": f"serve still serves {serving[:12]}, not the promoted {served_version[:12]} "
                      "(not swapped yet, or refused: see serve's log)"}  # fmt: skip
    got = collect(live_dir, consumed, served_version, live, rl.temperature, now)
    dissatisfied = Dissatisfaction(live.dissatisfied_patterns)
    row |= {"waiting": got.waiting, "counts": dict(got.counts)} | session_figures(got.sessions, dissatisfied)
    if len(got.sessions) < live.min_sessions:
        return row | {"result": "waiting", "cycle": state["cycle"]}

    rewards = [session_reward(s, cfg.reward, dissatisfied) for s in got.sessions]
    row["reward"] = sum(sum(r.values()) for r in rewards) / len(rewards)
    row["reward_components"] = {k: sum(r[k] for r in rewards) / len(rewards) for k in rewards[0]}
    incidents = alarms(got.sessions, rewards, live.monitors)
    for inc in incidents:
        print(f"[live] cycle {row['cycle']}: hack alarm: {inc['message']}", flush=True)
    row["incidents"] = [i["monitor"] for i in incidents]
    if incidents and not live.train_on_alarm:
        return finish(live_dir, state, consumed, got, row | {"result": "alarm"}, incidents)

    candidate = train(cfg, live_dir, data_dir, served, got, rewards, row)
    if candidate is None:  # every session earned the same: no advantage, nothing to train or promote
        return finish(live_dir, state, consumed, got, row | {"result": "nothing_to_learn"}, incidents)
    verdicts = gate(cfg, data_dir, served, candidate, state)
    row["gate"] = [v["message"] for v in verdicts]
    row["heldout_success"] = {"served": state["results"][served_version]["success"],
                              "candidate": state["results"][checkpoint_version(candidate)]["success"]}  # fmt: skip
    failed = [v for v in verdicts if not v["ok"]]
    if not verdicts:  # a gate that judged nothing must not wave a candidate through
        failed = [{"message": "no gate judged the candidate (live.gates match no suite, metric or stage 'live')"}]
    if not failed:
        row |= {"result": "promoted", "promoted": checkpoint_version(candidate)}
        print(f"[live] cycle {row['cycle']}: promoted {candidate}", flush=True)
        return finish(live_dir, state, consumed, got, row, incidents, promote=candidate)
    incidents.append({"monitor": "gate", "message": "; ".join(v["message"] for v in failed),
                      "candidate": str(candidate), "value": None, "threshold": None, "examples": []})  # fmt: skip
    row |= {"result": "rejected"}
    print(f"[live] cycle {row['cycle']}: the gate kept {served}: {failed[0]['message']}", flush=True)
    return finish(live_dir, state, consumed, got, row, incidents)


def finish(live_dir: Path, state: dict, consumed: dict, got: Collected, row: dict, incidents: list[dict],
           promote: Path | None = None) -> dict:  # fmt: skip
    """Record the cycle, in an order a crash cannot turn into harm: incidents; then the state (the
    cycle's number and the sessions it used, so no later cycle reuses either); then the promotion; then
    the row. A crash before the state re-runs the cycle on the same sessions; after it, at worst the
    promotion or the row is missing, and the served checkpoint stays what it was."""
    log = AppendLog(live_dir / INCIDENTS)
    for inc in incidents:
        log.append(inc | {"cycle": row["cycle"], "time": time.time()})
    log.close()
    consumed |= {s.id: {"turns": len(s.turns), "events": len(s.events)} for s in got.sessions}
    state |= {"cycle": row["cycle"], "consumed": consumed}
    write_json(live_dir / STATE, state)
    if promote is not None:
        set_served(live_dir, promote, checkpoint_version(promote))
    log = AppendLog(live_dir / CYCLES)
    log.append(row)
    log.close()
    return row


def train(cfg: Config, live_dir: Path, data_dir: Path, served: Path, got: Collected, rewards: list[dict[str, float]],
          row: dict) -> Path | None:  # fmt: skip
    """stages.rl's update on the cycle's turns; the candidate checkpoint, with its lineage (its data: the
    cycle's sessions, and the data folder whose held-out suites gate it)."""
    import shutil

    import torch

    from harnessrl.data.md5 import dvc_dir_md5
    from harnessrl.lineage.manifest import write_manifest
    from harnessrl.model.checkpoint import load, save
    from harnessrl.rl.loop import group_advantages
    from harnessrl.rl.trainer import LocalTrainer, Sample

    started = time.time()
    rl, dtype = cfg.stages.rl, cfg.model.dtype
    model, tok = load(served, dtype)
    reference = load(served, dtype)[0].eval() if rl.kl_coef > 0 else None
    totals = torch.tensor([sum(r.values()) for r in rewards])
    # Under reward.malformed_policy=drop a session with a malformed turn leaves the update and the
    # baseline, as in the RL stage (harnessrl/rl/loop.py: score).
    keep = torch.tensor([cfg.reward.malformed_policy == "negative" or not any(map(malformed, s.turns))
                         for s in got.sessions])  # fmt: skip
    advantages = group_advantages(totals, len(totals), rl.normalization, keep).tolist()
    samples = [
        Sample(t["prompt_ids"], t["completion_ids"], t["logprobs"], a)
        for s, a in zip(got.sessions, advantages, strict=True)
        if a != 0.0 or rl.kl_coef > 0  # as the RL stage: a zero advantage moves nothing but the KL term
        for t in s.turns
        if t["completion_ids"]
    ]
    if not samples:
        return None
    trainer = LocalTrainer(model, reference, rl, tok.pad_token_id)
    updates = [trainer.update(samples) for _ in range(cfg.live.epochs)]
    row["train"] = {"samples": len(samples), "tokens": sum(u.tokens for u in updates),
                    "grad_norm": max(u.grad_norm for u in updates),
                    "tis_weight": sum(u.tis_weight_sum for u in updates) / max(1, sum(u.tokens for u in updates))}  # fmt: skip

    batch_dir = live_dir / "cycles" / f"{row['cycle']:04d}"  # the cycle's data, as trained on
    with atomic_dir(batch_dir) as tmp:
        write_jsonl(tmp / "sessions.jsonl", [t for s in got.sessions for t in s.turns])
        write_jsonl(tmp / "feedback.jsonl", [e for s in got.sessions for e in s.events])
        write_json(tmp / "rewards.json", {s.id: r for s, r in zip(got.sessions, rewards, strict=True)})
    out = live_dir / "checkpoints" / f"cycle-{row['cycle']:04d}"
    if out.exists():  # cycle numbers are never reused (finish() saves the state first); refuse to overwrite
        raise FileExistsError(f"{out}: a candidate of this cycle number exists; {live_dir / STATE} is behind")
    with atomic_dir(out) as tmp:
        save(model, tok, tmp)
        if (served / "harness.json").is_file():  # trained in the harness it was served in
            shutil.copy(served / "harness.json", tmp / "harness.json")
        config = {"live": cfg.live.model_dump(), "rl": rl.model_dump(), "reward": cfg.reward.model_dump(),
                  "model": cfg.model.model_dump(), "seed": cfg.seed}  # fmt: skip
        write_manifest(tmp, stage="live", config=config, parent=served, data_md5=dvc_dir_md5(data_dir),
                       data_dir=data_dir, started=started,
                       seed=cfg.seed, world_size=1, metrics=row["train"] | {"cycle": row["cycle"]},
                       datasets={"sessions": {"md5": dvc_dir_md5(batch_dir), "path": str(batch_dir.resolve())}})  # fmt: skip
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def gate(cfg: Config, data_dir: Path, served: Path, candidate: Path, state: dict) -> list[dict]:
    """live.gates on stages.eval's held-out suites: the candidate judged against the served checkpoint,
    whose result a previous cycle may already have measured."""
    from harnessrl.lineage.manifest import read_manifest
    from harnessrl.report.build import checkpoint_result
    from harnessrl.report.episodes import checkpoint_rows
    from harnessrl.report.gates import check_gates
    from harnessrl.report.heldout import load_heldout

    ev = cfg.stages.eval
    tasks = load_heldout(data_dir, ev.mix, ev.num_tasks)

    def result(path: Path, stage: str) -> dict:
        m = read_manifest(path)
        rows = checkpoint_rows(path, tasks, data_dir, ev, cfg.model.dtype, cfg.engine)
        return checkpoint_result(stage, m["id"], m["manifest_hash"], str(path), rows, ev)

    key = checkpoint_version(served)
    if key not in state["results"]:
        state["results"][key] = result(served, read_manifest(served)["stage"])
    new = result(candidate, "live")
    state["results"][checkpoint_version(candidate)] = new
    return check_gates([state["results"][key], new], cfg.live.gates)
