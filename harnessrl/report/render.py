"""report.md and report.html from report.json: the headline (did RL help?), one table per suite
with 95% intervals, the gates, the plots. Every number names (md) or links to (html) the lineage id
of the checkpoint it measures."""

from __future__ import annotations

import html
import itertools
import os
from pathlib import Path
from typing import Any

from harnessrl.report.metrics import METRICS

COLUMNS = ["success", "pass_at_k", "malformed", "turns", "tool_calls", "parallel_share", "clarify_rate", "tokens",
           "wall_s"]  # fmt: skip
HEADERS = {"success": "pass@1", "pass_at_k": "pass@k", "malformed": "malformed", "turns": "turns",
           "tool_calls": "tool calls", "parallel_share": "parallel", "clarify_rate": "clarify", "tokens": "tokens",
           "wall_s": "wall s"}  # fmt: skip
VERDICT_WORDS = {"better": "RL helped", "worse": "RL hurt", "no clear change": "no clear change from RL"}


def _num(x: float, name: str) -> str:
    return f"{x:.0f}" if name == "tokens" else f"{x:.2f}" if name in ("turns", "tool_calls", "wall_s") else f"{x:.3f}"


def _cell(m: dict[str, Any] | None, name: str) -> str:
    if m is None:
        return "–"
    return f"{_num(m['value'], name)} [{_num(m['lo'], name)}, {_num(m['hi'], name)}]"


def _columns(report: dict[str, Any]) -> list[str]:
    has_k = any("pass_at_k" in s for r in report["results"] for s in r["suites"].values())
    return [c for c in COLUMNS if c != "pass_at_k" or has_k]


def headline(report: dict[str, Any]) -> tuple[str, str]:
    """(one sentence, verdict class) saying whether RL helped, from the paired success difference."""
    e = report.get("rl_effect")
    if len(report["results"]) == 1:  # one checkpoint or endpoint: its success is the headline
        r = report["results"][0]
        m = r["all"]["success"]
        return (
            f"{r['stage']} {r['checkpoint'][:12]}: success {m['value']:.3f} [95% CI {m['lo']:.3f}, {m['hi']:.3f}] "
            f"over {r['all']['episodes']} episodes.",
            "none",
        )
    if not e:
        return "No RL checkpoint in this chain: nothing to say about RL.", "none"
    d = e["success_diff"]
    by_stage = {r["stage"]: r for r in report["results"]}
    a, b = by_stage[e["from"]], by_stage[e["to"]]
    text = (
        f"{VERDICT_WORDS[e['verdict']] if e['verdict'] in VERDICT_WORDS else e['verdict']}: success "
        f"{a['success']:.3f} ({e['from']} {a['checkpoint'][:12]}) → {b['success']:.3f} ({e['to']} "
        f"{b['checkpoint'][:12]}), paired difference {d['value']:+.3f} [95% CI {d['lo']:+.3f}, {d['hi']:+.3f}] "
        f"over {d['pairs']} episodes."
    )
    return text, e["verdict"]


def _setup(report: dict[str, Any]) -> str:
    return (
        f"suites {', '.join(report['suites'])} · seeds {report['seeds']} · temperature {report['temperature']} · "
        f"up to {report['num_tasks']} tasks per suite · max {report['max_turns']} turns · data {report['data']}"
    )


def _vs_parent(report: dict[str, Any], stage: str) -> str:
    results = report["results"]
    for c, (parent, child) in zip(report["comparisons"], itertools.pairwise(results), strict=True):
        if c["stage"] == stage:
            d = c["success_diff"]
            # An RL stage that made no update keeps its parent's weights id: say so, it is not a typo.
            same = "; same weights as parent" if child["checkpoint"] == parent["checkpoint"] else ""
            return f"{d['value']:+.3f} ({c['verdict']}{same})"
    return ""


def incident_summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (stage, monitor): how often it fired, over which steps, and its first message."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for inc in report.get("incidents", []):
        monitor = inc["monitor"] + (f" on {inc['suite']}" if inc.get("suite") else "")
        groups.setdefault((inc["stage"], monitor), []).append(inc)
    return [
        {
            "stage": stage,
            "monitor": monitor,
            "count": len(incs),
            "first_step": incs[0]["step"],
            "last_step": incs[-1]["step"],
            "message": incs[0]["message"],
        }
        for (stage, monitor), incs in groups.items()
    ]


CHANGE_WINDOW = 5  # RL steps averaged at the start and at the end of a stage


def rl_changes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What RL changed in the tool strategy: per RL stage and strategy metric (per suite where its steps
    mixed suites), the mean over its first CHANGE_WINDOW steps and over its last."""
    from harnessrl.report.build import STRATEGY_KEYS

    def mean(xs: list[float]) -> float | None:
        xs = [x for x in xs if x == x]  # a step that solved nothing has no turns per solved (nan)
        return sum(xs) / len(xs) if xs else None

    out = []
    for stage in dict.fromkeys(r["stage"] for r in report.get("training", [])):
        rows = [r for r in report["training"] if r["stage"] == stage]
        keys = [k for base in STRATEGY_KEYS for k in dict.fromkeys(k for r in rows for k in r)
                if k == base or k.startswith(f"{base}/")]  # fmt: skip
        for key in keys:
            xs = [r[key] for r in rows if key in r]
            first, last = mean(xs[:CHANGE_WINDOW]), mean(xs[-CHANGE_WINDOW:])
            if first is not None or last is not None:
                out.append({"stage": stage, "metric": key, "first": first, "last": last, "steps": len(rows)})
    return out


def _change_cells(r: dict[str, Any]) -> list[str]:
    show = lambda x: "–" if x is None else f"{x:.3f}"
    diff = "–" if r["first"] is None or r["last"] is None else f"{r['last'] - r['first']:+.3f}"
    return [r["stage"], r["metric"], show(r["first"]), show(r["last"]), diff]


CHANGE_HEADERS = ["stage", "metric (/suite)", f"first {CHANGE_WINDOW} steps", f"last {CHANGE_WINDOW} steps", "change"]
CHANGE_NOTE = ("parallel_share: share of turns with more than one call; turns_per_solved: turns per solved episode; "
               "malformed_episodes: share of episodes with a malformed turn; asked: share that asked the user. "
               "Rollout batches of the RL steps, not held-out tasks.")  # fmt: skip


LH_HEADERS = ["method", "checkpoint", "success", "tokens per summary", "summaries", "compactions", "parallel",
              "ended by"]  # fmt: skip


def long_horizon_rows(report: dict[str, Any]) -> list[list[str]]:
    """The context methods side by side, as table cells."""
    from harnessrl.report.long_horizon import METHODS

    lh = report["long_horizon"]
    rows = []
    for method in METHODS:
        m = lh[method]
        s, p = m["success"], m["parallel_share"]
        ended = ", ".join(f"{k} {v}" for k, v in sorted(m["ended"].items(), key=lambda kv: -kv[1]))
        rows.append([method, m["checkpoint"][:12], f"{s['value']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}]",
                     f"{m['summary_tokens']:.1f}", f"{m['summaries']:.2f}", f"{m['compactions']:.2f}",
                     f"{p['value']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}]", ended])  # fmt: skip
    return rows


def _long_horizon_setup(lh: dict[str, Any]) -> str:
    c = lh["context"]
    return (f"{lh['tasks']} held-out tasks · context budget {c['budget']} tokens · summary at {c['trigger']}, "
            f"at most {c['summary_max_tokens']} tokens each, {c['max_summaries']} per episode · "
            f"max {lh['max_turns']} turns")  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    text, _ = headline(report)
    cols = _columns(report)
    lines = ["# Eval report", "", f"**{text}**", "", _setup(report), ""]
    for suite in report["suites"]:
        n = report["results"][0]["suites"][suite]
        lines += [f"## {suite} ({n['tasks']} tasks, {n['episodes']} episodes per checkpoint)", ""]
        lines += ["| checkpoint | lineage id | " + " | ".join(HEADERS[c] for c in cols) + " | success vs parent |"]
        lines += ["|" + "---|" * (len(cols) + 3)]
        for r in report["results"]:
            cells = [_cell(r["suites"][suite].get(c), c) for c in cols]
            lines.append(
                f"| {r['stage']} | `{r['checkpoint'][:12]}` | "
                + " | ".join(cells)
                + f" | {_vs_parent(report, r['stage'])} |"
            )
        lines.append("")
    lines += ["Values are point estimates with 95% intervals: Wilson for rates of episodes, a seeded bootstrap over "
              "episodes for means and per-turn shares; pass@k is the unbiased estimator over the seeds.", ""]  # fmt: skip
    if report.get("long_horizon"):
        lh = report["long_horizon"]
        lines += [
            "## Long horizon: truncation, untrained and trained summaries, no budget",
            "",
            _long_horizon_setup(lh),
            "",
        ]
        lines += ["| " + " | ".join(LH_HEADERS) + " |", "|" + "---|" * len(LH_HEADERS)]
        lines += ["| " + " | ".join(row) + " |" for row in long_horizon_rows(report)] + [""]
        ex = lh["example"]
        lines += [f"### One episode: {ex['task_id']} ({'solved' if ex['success'] else 'failed'}, {ex['stop_reason']})",
                  "", f"Task: {ex['instruction']} Expected: `{ex['expected']}`; answered: `{ex['answer']}`.", ""]  # fmt: skip
        for i, seg in enumerate(ex["segments"]):
            lines += [f"Segment {i + 1}:", "", "```"] + [f"[{m['role']}] {m['content']}" for m in seg] + ["```", ""]
    if report["gates"]:
        lines += ["## Gates", ""] + [f"- {'✓' if g['ok'] else '✗'} {g['message']}" for g in report["gates"]] + [""]
    lines += ["## What RL changed", ""]
    changes = rl_changes(report)
    if changes:
        lines += ["| " + " | ".join(CHANGE_HEADERS) + " |", "|" + "---|" * len(CHANGE_HEADERS)]
        lines += ["| " + " | ".join(_change_cells(r)) + " |" for r in changes] + ["", CHANGE_NOTE, ""]
        lines += ["![tool strategy over RL steps](rl_strategy.png)", ""]
    else:
        lines += ["No RL stage ran in this chain.", ""]
    summary = incident_summary(report)
    lines += ["### Reward-hacking incidents", ""]
    if not summary:
        lines += ["No monitor fired.", ""]
    else:
        lines += ["| stage | monitor | alarms | steps | first |", "|---|---|---|---|---|"]
        lines += [f"| {r['stage']} | {r['monitor']} | {r['count']} | {r['first_step']}–{r['last_step']} | "
                  f"{r['message']} |" for r in summary] + [""]  # fmt: skip
    lines += ["## Plots", "", "![success by stage](success_by_stage.png)", "", "![RL training](rl_training.png)", "",
              "![turns](turns_distribution.png)", "", "## Metrics", ""]  # fmt: skip
    lines += [f"- **{HEADERS[k]}** (`{k}`): {desc}" for k, (desc, _, _) in METRICS.items()]
    lines += ["", "Lineage ids are the checkpoints' weights ids (`harnessrl lineage show` prints them)."]
    for r in report["results"]:
        lines.append(f"- {r['stage']}: `{r['checkpoint']}` manifest `{r.get('manifest_hash') or '-'}` at {r['path']}")
    return "\n".join(lines) + "\n"


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
td:first-child,td:nth-child(2),th{text-align:left}a{color:inherit;text-decoration:none;border-bottom:1px dotted #888}
.headline{padding:12px 16px;border-radius:6px;font-size:16px;font-weight:600}
.better{background:#e8f5e9;border:1px solid #43a047}.worse{background:#ffebee;border:1px solid #e53935}
.none,.no{background:#f5f5f5;border:1px solid #9e9e9e}.fail{color:#c62828}.pass{color:#2e7d32}
.ci{color:#777;font-size:12px}img{max-width:100%;border:1px solid #eee;margin:8px 0}code{font-size:12px}
pre.seg{white-space:pre-wrap;background:#fafafa;padding:8px;font-size:12px}pre.seg span{display:block}
.summary{background:#fff3e0;font-weight:600}.tool{color:#555}"""


def _link(out: Path, r: dict[str, Any]) -> str:
    """Relative link from the report to the checkpoint's manifest (absolute when not under one root)."""
    if "://" in r["path"]:  # a served model: link to its endpoint
        return r["path"]
    manifest = Path(r["path"]) / "manifest.json"
    try:
        return os.path.relpath(manifest, out)
    except ValueError:
        return manifest.as_uri() if manifest.is_absolute() else str(manifest)


def _long_horizon_html(report: dict[str, Any]) -> str:
    e = html.escape
    lh = report["long_horizon"]
    parts = ["<h2>Long horizon: truncation, untrained and trained summaries, no budget</h2>", f"<p>{e(_long_horizon_setup(lh))}</p>",
             "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in LH_HEADERS) + "</tr>"]  # fmt: skip
    parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in long_horizon_rows(report)]
    parts.append("</table>")
    ex = lh["example"]
    parts.append(f"<h3>One episode: {e(ex['task_id'])} <span class='ci'>{'solved' if ex['success'] else 'failed'}, "
                 f"ended by {e(ex['stop_reason'])}</span></h3><p>Task: {e(ex['instruction'])}<br>Expected "
                 f"<code>{e(str(ex['expected']))}</code>, answered <code>{e(str(ex['answer']))}</code></p>")  # fmt: skip
    for i, seg in enumerate(ex["segments"]):
        parts.append(f"<details open><summary>Segment {i + 1}</summary><pre class='seg'>")
        for m in seg:
            cls = "summary" if m["role"] == "assistant" and m["content"] in ex["summaries"] else m["role"]
            parts.append(f"<span class='{cls}'>[{e(m['role'])}] {e(m['content'])}</span>")
        parts.append("</pre></details>")
    return "\n".join(parts)


def html_page(report: dict[str, Any], out: Path) -> str:
    text, verdict = headline(report)
    cols = _columns(report)
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Eval report</title><style>{CSS}</style>"
             "</head><body><h1>Eval report</h1>",
             f"<p class='headline {e(verdict.split()[0])}'>{e(text)}</p><p>{e(_setup(report))}</p>"]  # fmt: skip
    for suite in report["suites"]:
        n = report["results"][0]["suites"][suite]
        parts.append(
            f"<h2>{e(suite)} <span class='ci'>{n['tasks']} tasks, {n['episodes']} episodes per checkpoint</span></h2>"
        )
        parts.append("<table><tr><th>checkpoint</th><th>lineage id</th>" + "".join(
            f"<th title='{e(METRICS[c][0])}'>{e(HEADERS[c])}</th>" for c in cols) + "<th>success vs parent</th></tr>")  # fmt: skip
        for r in report["results"]:
            href, title = e(_link(out, r)), e(f"{r['stage']} checkpoint {r['checkpoint']}")
            row = [
                f"<td>{e(r['stage'])}</td><td><a href='{href}' title='{title}'><code>{e(r['checkpoint'][:12])}</code></a></td>"
            ]
            for c in cols:
                m = r["suites"][suite].get(c)
                if m is None:
                    row.append("<td>–</td>")
                    continue
                ci = f"[{_num(m['lo'], c)}, {_num(m['hi'], c)}]"
                row.append(
                    f"<td><a href='{href}' title='{title}'>{_num(m['value'], c)}</a> <span class='ci'>{ci}</span></td>"
                )
            row.append(f"<td>{e(_vs_parent(report, r['stage']))}</td>")
            parts.append("<tr>" + "".join(row) + "</tr>")
        parts.append("</table>")
    parts.append("<p class='ci'>95% intervals: Wilson for rates of episodes; seeded bootstrap over episodes for means "
                 "and per-turn shares. Hover a number for its checkpoint; click for its lineage manifest.</p>")  # fmt: skip
    if report.get("long_horizon"):
        parts.append(_long_horizon_html(report))
    if report["gates"]:
        parts.append("<h2>Gates</h2><ul>" + "".join(
            f"<li class='{'pass' if g['ok'] else 'fail'}'>{'✓' if g['ok'] else '✗'} {e(g['message'])}</li>"
            for g in report["gates"]) + "</ul>")  # fmt: skip
    parts.append("<h2>What RL changed</h2>")
    changes = rl_changes(report)
    if changes:
        parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in CHANGE_HEADERS) + "</tr>" + "".join(
            "<tr>" + "".join(f"<td>{e(c)}</td>" for c in _change_cells(r)) + "</tr>" for r in changes) + "</table>")  # fmt: skip
        parts.append(f"<p class='ci'>{e(CHANGE_NOTE)}</p><div><img src='rl_strategy.png' alt='tool strategy'></div>")
    else:
        parts.append("<p>No RL stage ran in this chain.</p>")
    summary = incident_summary(report)
    parts.append("<h3>Reward-hacking incidents</h3>")
    if not summary:
        parts.append("<p>No monitor fired.</p>")
    else:
        parts.append("<table><tr><th>stage</th><th>monitor</th><th>alarms</th><th>steps</th><th>first</th></tr>" + "".join(
            f"<tr class='fail'><td>{e(r['stage'])}</td><td>{e(r['monitor'])}</td><td>{r['count']}</td>"
            f"<td>{r['first_step']}–{r['last_step']}</td><td>{e(r['message'])}</td></tr>" for r in summary) + "</table>")  # fmt: skip
    parts.append("<h2>Plots</h2>")
    for name, alt in (("success_by_stage.png", "success by stage"), ("rl_training.png", "RL training"),
                      ("turns_distribution.png", "turns per episode")):  # fmt: skip
        parts.append(f"<div><img src='{name}' alt='{alt}'></div>")
    parts.append("<h2>Metrics</h2><ul>" + "".join(
        f"<li><b>{e(HEADERS[k])}</b>: {e(d)}</li>" for k, (d, _, _) in METRICS.items()) + "</ul></body></html>")  # fmt: skip
    return "\n".join(parts) + "\n"
