"""The data folder built from the lookup suite: deterministic, split by repo, SFT rows that render for
training, and prompt rows that carry what an episode needs."""

import json

import pytest

from harnessrl.config import Budgets, DataConfig
from harnessrl.data.build import build, read_jsonl
from harnessrl.data.corpus import corpus_texts
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.harness.episode import AssistantTurn, run_task
from harnessrl.tasks.expert import Expert
from harnessrl.tasks.task import Task
from tests.conftest import needs_bwrap

# Every test builds a data folder, whose conversations are expert episodes in the sandbox.
pytestmark = needs_bwrap

CFG = DataConfig(
    name="t",
    dir="data",
    seed=5,
    sources=[{"name": "generated", "generated": {"num_repos": 4, "files_per_repo": 3}}],
    num_sft=24,
    num_prompts=8,
    num_heldout=4,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build(CFG, tmp_path_factory.mktemp("d") / "data")


def test_build_is_deterministic(data, tmp_path):
    assert dvc_dir_md5(build(CFG, tmp_path / "again")) == dvc_dir_md5(data)


def test_rows_and_splits(data):
    sft, prompts, held = (read_jsonl(data / f) for f in ("sft.jsonl", "prompts.jsonl", "heldout.jsonl"))
    assert (len(sft), len(prompts), len(held)) == (CFG.num_sft, CFG.num_prompts, CFG.num_heldout)
    for row in prompts + held:
        task = Task.model_validate(row["task"])
        assert (data / task.repo).is_dir() and row["repo"] == task.repo.removeprefix("repos/")
        assert row["messages"][0]["role"] == "system" and row["messages"][1]["content"] == task.instruction
        assert {"name", "answer", "path"} <= set(row)
    assert {r["task"]["split"] for r in prompts} == {"train"} and {r["task"]["split"] for r in held} == {"heldout"}
    held_repos = {r["repo"] for r in held}
    assert held_repos and all(r.startswith("heldout/") for r in held_repos)
    corpus = [json.loads(line) for shard in sorted((data / "corpus").glob("shard-*.jsonl")) for line in shard.open()]
    assert {r["path"].split("/")[1] for r in corpus} == {"train"}  # held-out repos never reach CPT
    index = json.loads((data / "corpus" / "index.json").read_text())
    train_py = [p for p in (data / "repos" / "train").rglob("*.py") if p.read_text().strip()]
    assert len(corpus) == index["total"]["kept"] == len(train_py)  # every non-empty generated file, once


def test_sft_rows_are_expert_episodes_that_render(data):
    from harnessrl.model.tokenizer import as_hf, render_ids, segments, train_bpe

    rows = read_jsonl(data / "sft.jsonl")
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert row["messages"][2]["content"].startswith("<tool_call>")
    texts = list(corpus_texts(data)) + ["".join(t for t, _ in segments(r["messages"])) for r in rows]
    tok = as_hf(train_bpe(texts, 400))
    ids, mask = render_ids(tok, rows[0]["messages"])
    assert len(ids) == len(mask) and 0 < sum(mask) < len(ids)


def test_prompt_rows_run_as_episodes(data):
    for row in read_jsonl(data / "heldout.jsonl"):
        task = Task.model_validate(row["task"])
        traj = run_task(task, data, Expert(task), Budgets())
        assert traj.outcome.success is True
        assert run_task(task, data, give_up, Budgets()).outcome.success is False


def give_up(messages, tools, max_tokens):
    return AssistantTurn(text="no idea")


def test_guessing_teacher_guesses_only_value_questions_and_always_wrongly(tmp_path):
    data = build(CFG.model_copy(update={"guess_share": {"lookup": 0.5}, "num_sft": 64}), tmp_path / "data")
    guessed, looked = [], []
    for row in read_jsonl(data / "sft.jsonl"):
        m = row["messages"]
        (guessed if len(m) == 3 else looked).append(m)
    assert guessed and looked
    for m in guessed:  # one answer, no call
        assert m[1]["content"].startswith("What is the value of") and m[2] == {"role": "assistant", "content": "0"}
    assert all(m[2]["content"].startswith("<tool_call>") for m in looked)
    assert any(m[1]["content"].startswith("What is the value") for m in looked)  # a coin per task, not per kind
    # build() refuses a right guess; check the checker's verdict directly too
    tasks = {t.instruction: t for t in (Task.model_validate(r) for r in read_jsonl(data / "tasks" / "train.jsonl"))}
    for m in guessed[:4]:
        assert (
            run_task(tasks[m[1]["content"]], data, lambda *_: AssistantTurn(text="0"), Budgets()).outcome.success
            is False
        )


def test_each_data_config_has_its_own_folder(data, tmp_path):
    from harnessrl.config import compose
    from harnessrl.data.build import data_folder, folder_name

    assert data_folder(CFG, tmp_path) == tmp_path / "data" / folder_name(CFG)
    assert folder_name(CFG.model_copy(update={"dir": "elsewhere"})) == folder_name(CFG)  # where is not what
    assert folder_name(CFG.model_copy(update={"num_sft": 25})) != folder_name(CFG)
    tiny, smoke = compose([]).data, compose(["recipe=tiny_smoke"]).data
    assert folder_name(tiny).startswith("tiny-") and folder_name(smoke) != folder_name(tiny)


def test_a_folder_not_built_from_its_data_config_is_refused(data, tmp_path, capsys):
    import json
    import shutil

    from harnessrl.cli import main
    from harnessrl.config import ConfigError, compose
    from harnessrl.data.build import check_built_from, data_folder

    check_built_from(CFG.model_copy(update={"dir": "elsewhere"}), data)  # where it sits is not what it is
    with pytest.raises(ConfigError, match=r"data\.num_sft is 24 there, 25 here"):
        check_built_from(CFG.model_copy(update={"num_sft": 25}), data)
    # A folder under the smoke config's name that holds other data (copied by hand) is refused.
    fake = data_folder(compose(["recipe=tiny_smoke"]).data, tmp_path)
    shutil.copytree(data, fake)
    before = dvc_dir_md5(fake)
    rc = main(["run", "recipe=tiny_smoke", f"data.dir={fake.parent}", "--output-dir", str(tmp_path / "run")])
    assert rc == 2 and "was not built from this data config" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and dvc_dir_md5(fake) == before  # nothing written, nothing replaced
    assert json.loads((fake / "suite.json").read_text())["data"]["name"] == "t"
