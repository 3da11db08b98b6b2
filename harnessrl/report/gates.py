"""Regression gates: a checkpoint must not be worse than its parent, beyond a tolerance, on a gated
metric. Parent means the checkpoint before it in the chain (the one it was trained from), evaluated
on the same tasks and seeds in the same eval."""

from __future__ import annotations

import itertools
from typing import Any

from harnessrl.config import GateConfig
from harnessrl.report.metrics import METRICS

EPS = 1e-9  # equal numbers computed in a different order must not fail a zero-tolerance gate


def check_gates(results: list[dict[str, Any]], gates: list[GateConfig]) -> list[dict[str, Any]]:
    """One verdict per (gate, checkpoint, suite) judged, in chain order; `message` is one line."""
    verdicts = []
    for parent, child in itertools.pairwise(results):
        for gate in gates:
            if gate.stages and child["stage"] not in gate.stages:
                continue
            higher = METRICS[gate.metric][2] if gate.higher_is_better is None else gate.higher_is_better
            for suite in [gate.suite] if gate.suite else list(child["suites"]):
                new = child["suites"].get(suite, {}).get(gate.metric)
                old = parent["suites"].get(suite, {}).get(gate.metric)
                if new is None or old is None:  # e.g. pass@k of a greedy eval: nothing to judge
                    continue
                a, b = new["value"], old["value"]
                worse_by = (b - a) if higher else (a - b)
                ok = worse_by <= gate.tolerance + EPS
                verdicts.append(
                    {
                        "ok": ok,
                        "metric": gate.metric,
                        "suite": suite,
                        "stage": child["stage"],
                        "checkpoint": child["checkpoint"],
                        "parent_stage": parent["stage"],
                        "parent_checkpoint": parent["checkpoint"],
                        "value": a,
                        "parent_value": b,
                        "tolerance": gate.tolerance,
                        "higher_is_better": higher,
                        "message": (
                            f"{child['stage']} checkpoint {child['checkpoint'][:12]} {'passes' if ok else 'fails'} "
                            f"the {gate.metric} gate on {suite}: {a:.4f} vs parent {parent['stage']} "
                            f"{parent['checkpoint'][:12]} {b:.4f} ({'higher' if higher else 'lower'} is better, "
                            f"tolerance {gate.tolerance:g})"
                        ),
                    }
                )
    return verdicts


class GateFailed(RuntimeError):
    """Raised by the eval stage after its report is written; the message is one line."""


def failure_message(verdicts: list[dict[str, Any]], report_dir: str) -> str | None:
    failed = [v for v in verdicts if not v["ok"]]
    if not failed:
        return None
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"eval gate failed: {failed[0]['message']}{more}; report: {report_dir}"
