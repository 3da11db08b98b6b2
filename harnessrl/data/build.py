"""Build the recipe's data folder deterministically: same seed and code, same bytes.

The folder is a suite directory (see harnessrl/tasks/task.py) of the lookup and long-horizon suites,
which share its repos, plus the stages' files:
  repos/{train,heldout}/<repo>/...   generated Python repos; the train ones go into the CPT corpus
  corpus/shard-*.jsonl, index.json   the CPT corpus: train files and data.corpus, filtered, deduplicated
                                     and decontaminated against held-out files (harnessrl/data/corpus.py)
  tasks/{train,heldout}.jsonl        every task, by split (held-out repos are never trained on)
  suite.json                         how the suite was built, and under "data" the data config (less dir)
  sft.jsonl                          {"messages": [...]}: the expert's trajectories, run in the harness;
                                     a long-horizon one as a row per context segment
  prompts.jsonl                      RL tasks (train split), both suites; each stage takes its suites
  heldout.jsonl                      eval tasks (held-out split)
  harness.json                       the harness the SFT conversations were made in

A row of prompts/heldout carries the whole task under "task" (its "repo" is relative to this folder),
so a stage runs an episode with `run_task(Task.model_validate(row["task"]), data_dir, policy, budgets)`. The
other keys serve the stages that score a first turn directly: "repo" (relative to repos/),
"messages" (the episode's opening messages), "name", "answer" and "path".
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harnessrl.config import (
    Budgets,
    ConfigError,
    ContextConfig,
    DataConfig,
    LongHorizonDataConfig,
    StoreConfig,
    SuiteCounts,
    SweFileConfig,
    config_hash,
)
from harnessrl.data.corpus import build_corpus, eval_ngrams, shares_ngram, source_files
from harnessrl.harness.episode import Trajectory, prompt_messages
from harnessrl.harness.spec import HarnessSpec, save_harness, tools_of
from harnessrl.io import atomic_dir
from harnessrl.sources.copies import write_sources
from harnessrl.tasks import hard_lookup, long_horizon, lookup, multi_lookup, swe
from harnessrl.tasks.expert import expert_trajectories
from harnessrl.tasks.mine import mine_sources
from harnessrl.tasks.task import SPLITS, Task, write_suite_info, write_tasks
from harnessrl.tasks.validate import mining_stats


class Progress:
    """Lines like `data: expert episodes 1200/4352 (27%, 41 s)`, one per tenth of the work: plain
    lines, so a pod's log shows them as well as a terminal does. Called from worker threads."""

    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show, self.done, self.t0 = total, show, 0, time.time()
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        if self.show:
            print(f"data: {text} ({time.time() - self.t0:.0f} s)", flush=True)

    def step(self) -> None:
        with self.lock:
            self.done += 1
            if self.done * 10 // self.total > (self.done - 1) * 10 // self.total or self.done == self.total:
                self.say(f"expert episodes {self.done}/{self.total} ({100 * self.done // self.total}%)")


def build(
    cfg: DataConfig,
    out: Path,
    progress: bool = False,
    store: StoreConfig | None = None,
    processes: int = 1,
    use_ray: bool = False,
) -> Path:
    """Write the data folder atomically: a killed build never leaves a half-written `out`. The
    temporary folder sits beside `out` as `.<name>.tmp-*`, ignored by git and removed on failure.
    `progress` prints a line per tenth of the expert's episodes, the slow part. `store` reaches
    data.corpus files and source archives on s3://. `processes` mines real sources in parallel, `use_ray`
    as Ray tasks (the same bytes either way)."""
    rng = random.Random(cfg.seed)
    with atomic_dir(out) as tmp:
        gen = cfg.generated
        repos = lookup.generate(rng, gen.num_repos, gen.files_per_repo) if gen else []
        tasks = {s: [t for _, _, ts in repos for t in ts if t.split == s] for s in SPLITS}
        for rel, repo, _ in repos:
            repo.write(tmp / rel)
        # The CPT corpus: the train repos' files and data.corpus; the held-out repos' files only keep
        # their like out. Paths are relative to the data folder (repos/train/...).
        sft = _take(rng, tasks["train"], cfg.num_sft)
        prompts = _take(rng, tasks["train"], cfg.num_prompts)
        heldout = _take(rng, tasks["heldout"], cfg.num_heldout)

        # The long-horizon suite asks about the same repos, drawn from a generator of its own, so the
        # lookup data above is the same with or without it.
        lh_cfg, lh_rng = cfg.long_horizon, random.Random(f"long_horizon-{cfg.seed}")
        lh = {s: [] for s in SPLITS}
        for rel, repo, _ in repos:
            split = rel.split("/")[1]
            lh[split] += long_horizon.repo_tasks(lh_rng, repo, rel, split, lh_cfg.tasks_per_repo,
                                                 (lh_cfg.facts_min, lh_cfg.facts_max))  # fmt: skip
        lh_sft, lh_prompts, lh_held = _draw(lh_rng, lh, lh_cfg)
        prompts, heldout = prompts + lh_prompts, heldout + lh_held

        # multi_lookup asks about the same repos, hard_lookup about repos of its own; each draws from a
        # generator of its own, so the data above is the same with or without them.
        ml_cfg, ml_rng = cfg.multi_lookup, random.Random(f"multi_lookup-{cfg.seed}")
        ml = {s: [] for s in SPLITS}
        for rel, repo, _ in repos:
            split = rel.split("/")[1]
            ml[split] += multi_lookup.repo_tasks(ml_rng, repo, rel, split, 2, (ml_cfg.names_min, ml_cfg.names_max))
        ml_sft, ml_prompts, ml_held = _draw(ml_rng, ml, ml_cfg)
        prompts, heldout = prompts + ml_prompts, heldout + ml_held

        hard_cfg, hard, hard_rng = cfg.hard_lookup, {s: [] for s in SPLITS}, random.Random(f"hard_lookup-{cfg.seed}")
        if hard_cfg.num_sft + hard_cfg.num_prompts + hard_cfg.num_heldout:  # else no repos to write
            for rel, repo, _ in lookup.generate(hard_rng, hard_cfg.num_repos, gen.files_per_repo, True, "h"):
                repo.write(tmp / rel)
                hard[rel.split("/")[1]] += hard_lookup.repo_tasks(repo, rel, rel.split("/")[1])
        hard_sft, hard_prompts, hard_held = _draw(hard_rng, hard, hard_cfg)
        prompts, heldout = prompts + hard_prompts, heldout + hard_held

        # The expert runs each distinct task once.
        bar = Progress(len({t.id for t in [*sft, *lh_sft, *ml_sft, *hard_sft]}), progress)
        bar.say(f"{len(repos)} repos generated; running the expert on {bar.total} tasks")
        sft_rows = [
            {"messages": m, "suite": lookup.SUITE}
            for m in _expert_messages(sft, tmp, cfg.guess_share.get(lookup.SUITE, 0.0), bar.step)
        ]
        if lh_sft:
            sft_rows += [
                {"messages": seg, "suite": long_horizon.SUITE} for seg in expert_segments(lh_sft, tmp, lh_cfg, bar.step)
            ]
        # multi_lookup: parallel searches on a share. hard_lookup: the expert never shows the second
        # search, so these tasks stay hard for the policy; after the miss it asks on a share, else guesses.
        parallel = {t.id: "parallel" for t in ml_sft if _coin("parallel", t.id, ml_cfg.parallel_share)}
        for m in _habit_messages(ml_sft, tmp, parallel, bar.step):
            sft_rows.append({"messages": m, "suite": multi_lookup.SUITE})
        after_miss = {t.id: "ask" if _coin("ask", t.id, hard_cfg.ask_share) else "guess" for t in hard_sft}
        for m in _habit_messages(hard_sft, tmp, after_miss, bar.step):
            sft_rows.append({"messages": m, "suite": hard_lookup.SUITE})

        # Real sources: copied in, mined and validated. Every kept train task's prompt is an RL prompt,
        # and its expert episode an SFT conversation unless its source says `sft: false`; held-out
        # sources give eval tasks only.
        real = [s for s in cfg.sources if s.generated is None]
        mined, episodes, infos, stats = mine_sources(
            real, cfg.seed, tmp, store, bar.say, processes=processes, use_ray=use_ray
        )
        for swe_file in cfg.swe:  # task rows in the SWE-bench schema: the swe suite
            tasks_of, runs, stats[f"swe:{Path(swe_file.path).name}"] = import_swe(swe_file, cfg.seed, tmp, bar.say)
            for split in SPLITS:
                mined[split] += [t for t in tasks_of if t.split == split]
            episodes.update(runs)
        # A train task whose instruction shares EVAL_NGRAM words with an eval task's (an issue filed
        # twice, a docstring quoted in both) would teach the eval's answer: it is left out.
        train_texts = [t.instruction for t in tasks["train"] + mined["train"]]
        grams = eval_ngrams([t.instruction for t in heldout + mined["heldout"]], train_texts)
        clean = [t for t in mined["train"] if not shares_ngram(t.instruction, grams)]
        if len(clean) < len(mined["train"]):
            bar.say(
                f"{len(mined['train']) - len(clean)} train tasks left out: their instructions overlap an eval task's"
            )
        mined["train"] = clean
        guessed = guesses(mined["train"], tmp, cfg.guess_share)  # the teacher's lazy habit, per suite
        episodes |= guessed
        rl_only = {s.name for s in real if not s.sft}  # their tasks are RL prompts, never SFT conversations
        taught = [t for t in mined["train"] if t.source not in rl_only]
        # A long-horizon task teaches the summary turn, as the generated suite's do: the expert runs
        # it again under the data config's compacting harness, and each context segment is a row.
        # Its episode with no context budget stays a row too: segments alone show searches that end
        # in a summary request, never in an answer, and SmolLM2 taught on them searched on and on
        # in every episode that asked for no summary (the same search, five turns running).
        lh_mined = [t for t in taught if t.suite == long_horizon.SUITE]
        segments = expert_segments(lh_mined, tmp, lh_cfg) if lh_mined else []
        # A mined multi_lookup conversation makes every search in one turn on `parallel_share` of them
        # (each task's own coin, a guessed one excepted), as the generated suite's do: else SFT never
        # shows a parallel call and RL has none to reinforce. The rest keep their validation episode.
        parallel = {t.id: "parallel" for t in taught if t.suite == multi_lookup.SUITE and t.id not in guessed
                    and _coin("parallel", t.id, ml_cfg.parallel_share)}  # fmt: skip
        messages = {t.id: episodes[t.id].messages for t in taught}
        redone = [t for t in taught if t.id in parallel]
        messages |= dict(zip([t.id for t in redone], _habit_messages(redone, tmp, parallel), strict=True))
        sft_rows += [{"messages": messages[t.id], "suite": t.suite} for t in taught]
        sft_rows += [{"messages": seg, "suite": long_horizon.SUITE} for seg in segments]
        prompts += mined["train"]
        heldout += mined["heldout"]
        write_sources(tmp, infos)

        # The CPT corpus: the train sources' files (generated repos, real sources' copies; never a
        # task's snapshot with its planted change) and the corpus shards. Held-out sources' files and
        # held-out SWE rows' snapshots are read only to keep their like out, and every eval task's
        # instruction to keep its text out (decontamination).
        def corpus_files(split: str) -> Iterator[tuple[str, str, str]]:
            for rel, _, _ in repos:
                if rel.split("/")[1] == split:
                    yield from source_files("generated", tmp / rel, cfg.filters.extensions, tmp)
            for src in real:
                if src.split == split:
                    yield from source_files(src.name, tmp / "repos" / split / src.name, cfg.filters.extensions, tmp)
            if split == "heldout":
                for t in mined["heldout"]:
                    if t.suite == swe.SUITE:
                        yield from source_files(swe.SUITE, tmp / t.repo, cfg.filters.extensions, tmp)

        build_corpus(
            corpus_files("train"), corpus_files("heldout"), cfg.corpus, cfg.filters, tmp, store, bar.say, grams
        )
        (tmp / "mining.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")

        for split in SPLITS:
            write_tasks(
                tmp / "tasks" / f"{split}.jsonl", tasks[split] + lh[split] + ml[split] + hard[split] + mined[split]
            )
        counts = {s: len(tasks[s]) + len(lh[s]) + len(ml[s]) + len(hard[s]) + len(mined[s]) for s in SPLITS}
        write_suite_info(tmp, {"suite": lookup.SUITE, "seed": cfg.seed, "num": sum(counts.values()),
                               "source": None, "counts": counts, "data": _recorded(cfg)})  # fmt: skip
        _jsonl(tmp / "sft.jsonl", sft_rows)
        _jsonl(tmp / "prompts.jsonl", [_row(t) for t in prompts])
        _jsonl(tmp / "heldout.jsonl", [_row(t) for t in heldout])
        # The harness the SFT conversations were made in: its tools and system prompt, which SFT
        # hands on to its checkpoint. (The expert compacted at its own estimate of tokens; the
        # context policy a checkpoint runs under is set by the long-horizon stage.)
        tools = tools_of(
            [lookup.TOOLS, long_horizon.TOOLS, *(t.tools for split in SPLITS for t in hard[split] + mined[split])]
        )
        save_harness(HarnessSpec.training(tools, Budgets()), tmp)
    bar.say(f"wrote {out}")
    return out


def import_swe(
    swe_file: SweFileConfig, seed: int, tmp: Path, say: Callable[[str], None]
) -> tuple[list[Task], dict[str, Trajectory], dict]:
    """One SWE-bench-format file's rows as validated swe tasks in the data folder, the expert's
    episodes, and its mining stats."""
    rows = swe.read_rows(Path(swe_file.path))
    held = swe.heldout_repos([r.repo for _, r in rows], swe_file.heldout_repos, seed)
    quiet = lambda _line: None  # a line per row is for `tasks import`; here, one per file
    candidates, dropped = swe.swe_candidates(rows, Path(swe_file.repos), tmp, held, quiet)
    kept, episodes, failed = swe.validate_rows(candidates, tmp, 4, quiet)
    say(f"swe {swe_file.path}: {len(kept)} of {len(rows)} rows kept")
    return kept, episodes, {swe.SUITE: mining_stats(len(rows), len(kept), dropped + failed)}


def _recorded(cfg: DataConfig) -> dict:
    """What a data folder was built from; where it sits (dir) is not part of it."""
    return cfg.model_dump(exclude={"dir"})


def folder_name(cfg: DataConfig) -> str:
    """The data config's own folder name, `<name>-<hash of the config>`: every data config (a recipe's,
    or one changed by an override) gets its own folder, so building one never touches another's."""
    return f"{cfg.name}-{config_hash(_recorded(cfg))[:8]}"


def data_folder(cfg: DataConfig, root: Path | None = None) -> Path:
    """Where the folder of this data config lives: `<data.dir>/<folder_name>`, data.dir relative to
    `root` (default: the working directory) unless absolute. Its DVC pointer sits next to it as
    `<folder_name>.dvc`, which git tracks."""
    parent = Path(cfg.dir) if Path(cfg.dir).is_absolute() else (root or Path.cwd()) / cfg.dir
    return parent / folder_name(cfg)


def check_built_from(cfg: DataConfig, data_dir: Path) -> None:
    """Refuse a data folder built from another data config, which a run would otherwise train and
    evaluate on while its config and lineage describe different data."""
    info = json.loads((data_dir / "suite.json").read_text()) if (data_dir / "suite.json").is_file() else {}
    built, want = info.get("data"), _recorded(cfg)
    if built == want:
        return
    if built is None:
        why = "its suite.json records no data config"
    else:
        keys = sorted(built.keys() | want.keys())  # a field added or removed since differs too
        why = ", ".join(
            f"data.{k} is {built.get(k)!r} there, {want.get(k)!r} here" for k in keys if built.get(k) != want.get(k)
        )
    raise ConfigError(f"{data_dir} was not built from this data config ({why}): its name is the config's, so "
                      "it was changed by other code or by hand; remove it, and `harnessrl data build` (with "
                      "the same recipe and overrides) builds it again")  # fmt: skip


def _expert_messages(
    tasks: list[Task], suite_dir: Path, guess_share: float, on_done: Callable[[], None] | None = None
) -> list[list[dict]]:
    """The expert's lookup conversations, the teacher's guess on `guess_share` of them (guessed_tasks)."""
    guessed = guessed_tasks(list({t.id: t for t in tasks}.values()), guess_share)
    return _habit_messages(tasks, suite_dir, dict.fromkeys(guessed, "guess"), on_done)


def expert_segments(
    tasks: list[Task], suite_dir: Path, cfg: LongHorizonDataConfig, on_done: Callable[[], None] | None = None
) -> list[list[dict]]:
    """The expert's long-horizon conversations, one per context segment: it summarizes whenever its
    context reaches `cfg.trigger` (estimated tokens), so SFT learns the format of a summary turn and
    how to go on from one. Verbose summaries on a `verbose_share` of tasks, by each task's own coin."""
    unique = list({t.id: t for t in tasks}.values())
    verbose = frozenset(t.id for t in unique if _coin("verbose", t.id, cfg.verbose_share))
    context = ContextConfig(policy="summarize", budget=cfg.trigger + 100_000, trigger=cfg.trigger,
                            summary_max_tokens=100_000, max_summaries=cfg.max_summaries)  # fmt: skip
    budgets = Budgets(max_turns=cfg.max_turns, context=context)
    trajectories = expert_trajectories(unique, suite_dir, workers=4, budgets=budgets,
                                       habits=dict.fromkeys(verbose, "verbose"), on_done=on_done)  # fmt: skip
    by_id = {tr.task_id: tr for tr in trajectories}
    failed = [i for i, tr in by_id.items() if not tr.outcome.success]
    if failed:
        raise RuntimeError(f"the expert failed {len(failed)} long-horizon tasks, e.g. {failed[0]}: "
                           f"{by_id[failed[0]].outcome.details}")  # fmt: skip
    return [seg for t in tasks for seg in by_id[t.id].segments()]


def _coin(habit: str, task_id: str, share: float) -> bool:
    """Each task's own coin for a habit: the choice does not depend on which other tasks were drawn."""
    return random.Random(f"{habit}-{task_id}").random() < share


def _habit_messages(
    tasks: list[Task], suite_dir: Path, habits: dict[str, str], on_done: Callable[[], None] | None = None
) -> list[list[dict]]:
    """The expert's conversation for each task, with the habit `habits` gives its id, if any; each
    distinct task runs once in the sandboxed harness. Every episode must succeed, except those that ask
    (no user answers, so the episode ends unsolved) or guess (a wrong answer): their failure is the
    habit. Anything else is a bug in the generator or the expert, never data, and stops the build."""
    unique = list({t.id: t for t in tasks}.values())
    runs = expert_trajectories(unique, suite_dir, workers=4, habits=habits, on_done=on_done)
    found = {tr.task_id: tr for tr in runs}
    wrong = [i for i, tr in found.items() if tr.outcome.success == (habits.get(i) in ("ask", "guess"))]
    if wrong:
        raise RuntimeError(f"the expert's episode went wrong on {len(wrong)} {tasks[0].suite} tasks (a script "
                           f"failed, or a habit succeeded), e.g. {wrong[0]}: {found[wrong[0]].outcome.details}")  # fmt: skip
    return [found[t.id].messages for t in tasks]


def guessed_tasks(tasks: list[Task], share: float) -> frozenset[str]:
    """The tasks whose SFT conversation is the teacher's guess: each task's own coin, so the choice
    does not depend on which other tasks were drawn, and the model cannot tell them apart. Of the
    lookups, only "what is the value" questions are guessed."""
    return frozenset(
        t.id for t in tasks if (t.suite != lookup.SUITE or t.solution.kind == "value") and _coin("guess", t.id, share)
    )


def guesses(tasks: list[Task], suite_dir: Path, shares: dict[str, float]) -> dict[str, Trajectory]:
    """The guessed episodes of mined train tasks, by task id, to stand in for the expert's: by each
    suite's share, the teacher answers "0" without a look, run in the harness so SFT sees the real
    conversation. A guess that happens to be right is luck, not a habit: that task keeps the expert's."""
    chosen = [t for t in tasks if t.id in guessed_tasks([t], shares.get(t.suite, 0.0))]
    ids = frozenset(t.id for t in chosen)
    runs = expert_trajectories(chosen, suite_dir, workers=4, habits=dict.fromkeys(ids, "guess")) if chosen else []
    return {tr.task_id: tr for tr in runs if not tr.outcome.success}


def _row(task: Task) -> dict:
    return {
        "task": task.model_dump(),
        "repo": task.repo.removeprefix("repos/"),
        "messages": prompt_messages(task),
        "name": task.solution.name,
        "answer": task.check.answer,
        "path": task.solution.path,
    }


def _draw(rng: random.Random, pools: dict[str, list[Task]], counts: SuiteCounts) -> tuple[list, list, list]:
    """A generated suite's SFT tasks and RL prompts (train pool) and eval prompts (held-out pool), by
    its counts. A count of 0 draws nothing from `rng`, so adding a suite's count never changes the rest."""
    return tuple(_take(rng, pools[split], n) if n else []
                 for split, n in (("train", counts.num_sft), ("train", counts.num_prompts),
                                  ("heldout", counts.num_heldout)))  # type: ignore[return-value]  # fmt: skip


def _take(rng: random.Random, pool: list, n: int) -> list:
    """n items, cycling through a shuffled pool when it is smaller than n."""
    order = pool[:]
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(path: Path | str) -> list[dict]:
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]
