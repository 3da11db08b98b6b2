"""Real sources: what is read from a path, how its version is pinned, and a data build from them, with
no held-out source's code in the corpus or the SFT conversations."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from harnessrl.config import DataConfig, SourceConfig, StoreConfig
from harnessrl.data.build import build
from harnessrl.data.corpus import corpus_texts
from harnessrl.harness.context import SUMMARIZE_REQUEST
from harnessrl.sources.copies import SourceError, copy_source, read_sources
from harnessrl.tasks.task import load_tasks
from tests.conftest import needs_bwrap
from tests.s3_server import S3, s3  # noqa: F401

PACKAGE = {
    "__init__.py": '"""A tiny package."""\n',
    "units.py": 'SCALE = 1000\nLABEL = "kilo"\n\n\ndef scaled(x):\n    return x * SCALE\n\n\nclass Meter:\n    pass\n',
    "text.py": "import os\n\nWIDTH = 72\n\n\ndef shout(word):\n    return word.upper() + os.sep\n",
    "notes.txt": "not code\n",
}


def write_package(root: Path, files: dict[str, str] = PACKAGE) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env)
    return out.stdout.strip()


def test_a_plain_directory_is_pinned_by_its_tree_hash(tmp_path):
    src = write_package(tmp_path / "units")
    info = copy_source(SourceConfig(name="units", path=str(src), license="MIT"), tmp_path / "copy")
    # A package root keeps its name as a folder, so its modules import as they did.
    assert sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*.py")) == [
        "units/__init__.py", "units/text.py", "units/units.py"]  # fmt: skip
    assert info.revision.startswith("tree:") and info.files == 3 and info.license == "MIT"
    again = copy_source(SourceConfig(name="units", path=str(src)), tmp_path / "copy2")
    assert again.revision == info.revision
    (src / "text.py").write_text("WIDTH = 80\n")
    assert copy_source(SourceConfig(name="units", path=str(src)), tmp_path / "copy3").revision != info.revision


def test_include_and_exclude_choose_the_files(tmp_path):
    src = write_package(tmp_path / "units")
    cfg = SourceConfig(name="u", path=str(src), include=["**/*.py", "*.txt"], exclude=["text.py"])
    copy_source(cfg, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy" / "units").iterdir()) == ["__init__.py", "notes.txt", "units.py"]


def test_a_git_checkout_is_read_at_its_commit_and_left_untouched(tmp_path):
    repo = write_package(tmp_path / "repo")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "units.py").write_text("SCALE = 2\n")
    git(repo, "commit", "-qam", "two")
    (repo / "text.py").write_text("UNCOMMITTED = 1\n")  # never part of a version
    info = copy_source(SourceConfig(name="r", path=str(repo)), tmp_path / "head")
    assert info.revision == git(repo, "rev-parse", "HEAD")
    assert "UNCOMMITTED" not in (tmp_path / "head" / "repo" / "text.py").read_text()
    old = copy_source(SourceConfig(name="r", path=str(repo), revision=first[:8]), tmp_path / "old")
    assert old.revision == first and "SCALE = 1000" in (tmp_path / "old" / "repo" / "units.py").read_text()
    assert git(repo, "status", "--porcelain") == "M text.py"  # the user's clone: as it was
    with pytest.raises(SourceError, match=r"source 'r': .* has no commit 'nope'"):
        copy_source(SourceConfig(name="r", path=str(repo), revision="nope"), tmp_path / "bad")


def test_stdlib_site_and_single_module_sources(tmp_path):
    assert copy_source(SourceConfig(name="j", path="stdlib:json"), tmp_path / "j").files >= 4
    assert (tmp_path / "j" / "json" / "decoder.py").is_file()
    copy_source(SourceConfig(name="a", path="stdlib:argparse"), tmp_path / "a")  # a module, not a package
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["argparse.py"]
    assert copy_source(SourceConfig(name="h", path="site:hydra"), tmp_path / "h").files > 20


def test_a_missing_source_names_itself_and_the_place(tmp_path):
    with pytest.raises(SourceError, match=r"source 'gone': .*/nowhere does not exist"):
        copy_source(SourceConfig(name="gone", path=str(tmp_path / "nowhere")), tmp_path / "c")
    with pytest.raises(SourceError, match=r"source 'pkg': site:no_such_pkg_x: no installed package"):
        copy_source(SourceConfig(name="pkg", path="site:no_such_pkg_x"), tmp_path / "c")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"source 'e': no files of .* match include"):
        copy_source(SourceConfig(name="e", path=str(tmp_path / "empty")), tmp_path / "c")


def test_an_archive_on_the_store(tmp_path, s3: S3):  # noqa: F811
    import boto3

    src = write_package(tmp_path / "units")
    archive = tmp_path / "units.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname=".")
    boto3.client("s3", endpoint_url=s3.endpoint).upload_file(str(archive), s3.bucket, "src/units.tar.gz")
    store = StoreConfig(uri=f"s3://{s3.bucket}/x", endpoint_url=s3.endpoint)
    info = copy_source(SourceConfig(name="units", path=f"s3://{s3.bucket}/src/units.tar.gz"), tmp_path / "c", store)
    assert info.files == 3 and info.revision.startswith("tree:")
    with pytest.raises(SourceError, match=r"source 'units': cannot read s3://"):
        copy_source(SourceConfig(name="units", path=f"s3://{s3.bucket}/src/missing.tar.gz"), tmp_path / "d", store)


def test_source_config_refuses_what_would_not_take_effect():
    with pytest.raises(ValueError, match="exactly one of path or generated"):
        SourceConfig(name="x")
    with pytest.raises(ValueError, match="tasks apply to a path"):
        SourceConfig(name="g", generated={"num_repos": 2, "files_per_repo": 2}, tasks={"lookup": 2})
    with pytest.raises(ValueError, match="revision is for a git checkout"):
        SourceConfig(name="s", path="stdlib:json", revision="abc")
    with pytest.raises(ValueError, match="sft is for a train source"):
        SourceConfig(name="s", path="stdlib:json", split="heldout", sft=False)
    with pytest.raises(ValueError, match="used twice"):
        DataConfig(name="d", dir="data", sources=[{"name": "a", "path": "/x"}, {"name": "a", "path": "/y"}])
    with pytest.raises(ValueError, match="count tasks of generated repos"):
        DataConfig(name="d", dir="data", sources=[{"name": "a", "path": "/x"}], num_sft=4)


@needs_bwrap
def test_a_data_build_from_real_sources_keeps_held_out_code_out_of_training(tmp_path):
    train = write_package(tmp_path / "units", {**PACKAGE, "limits.py": "DEPTH = 3\n"})  # three numbers
    secret = (
        'SECRET = 5\nNAME = "held"\n\n\ndef only_here(value):\n    return value + 12345\n\n\nclass Vault:\n    pass\n'
    )
    held = write_package(tmp_path / "held", {"__init__.py": "", "secret.py": secret})
    rl_only = write_package(tmp_path / "fresh", {"__init__.py": "", "fresh.py": "FRESH = 77\nOTHER = 78\n"})
    cfg = DataConfig(
        name="real",
        dir="data",
        sources=[
            {
                "name": "units",
                "path": str(train),
                "license": "MIT",
                "tasks": {"lookup": 4, "edit": 2, "lint": 2, "long_horizon": 1, "multi_lookup": 2},
            },
            {"name": "fresh", "path": str(rl_only), "sft": False, "tasks": {"lookup": 2}},
            {"name": "held", "path": str(held), "split": "heldout", "tasks": {"lookup": 3}},
        ],
        guess_share={"edit": 1.0},  # every edit conversation the lazy teacher's
        multi_lookup={"parallel_share": 1.0},  # and every multi-lookup's searches in one turn
    )
    out = build(cfg, tmp_path / "data")
    sources = {s["name"]: s for s in read_sources(out)}
    assert sources["units"]["license"] == "MIT" and sources["held"]["split"] == "heldout"
    mining = json.loads((out / "mining.json").read_text())
    assert mining["units"]["lookup"]["kept"] == 4 and mining["units"]["lookup"]["expert_success"] == 1.0
    heldout = load_tasks(out / "tasks" / "heldout.jsonl")
    assert {t.source for t in heldout} == {"held"} and all(t.split == "heldout" for t in heldout)
    assert {t.source for t in load_tasks(out / "tasks" / "train.jsonl")} == {"units", "fresh"}
    # An RL-only source gives RL prompts and no SFT conversation.
    assert "FRESH" in (out / "prompts.jsonl").read_text() and "FRESH" not in (out / "sft.jsonl").read_text()
    # Decontamination: the held-out source's code is in no SFT conversation, prompt or corpus file.
    sft = (out / "sft.jsonl").read_text()
    assert "12345" not in sft and "SECRET" not in sft and "held/" not in sft
    assert "12345" not in (out / "prompts.jsonl").read_text()
    corpus = list(corpus_texts(out))
    assert any("SCALE = 1000" in t for t in corpus) and not any("12345" in t for t in corpus)
    rows = [json.loads(r) for r in sft.splitlines()]
    assert {r["suite"] for r in rows} == {"lookup", "edit", "lint", "long_horizon", "multi_lookup"}
    multi = [r["messages"] for r in rows if r["suite"] == "multi_lookup"]
    assert multi and all(m[2]["content"].count("<tool_call>") >= 2 for m in multi)  # parallel, as mined
    # A mined long-horizon task teaches the summary turn: the expert's episode, a row per segment,
    # beside its episode with no budget, which answers after the searches.
    whole, first, *later = [r["messages"] for r in rows if r["suite"] == "long_horizon"]
    assert SUMMARIZE_REQUEST not in json.dumps(whole) and whole[-1]["content"].count("=") == 3
    assert first[-2]["content"] == SUMMARIZE_REQUEST and later and later[0][2]["content"].startswith("Summary 1:")
    assert {r["messages"][-1]["content"] for r in rows if r["suite"] == "edit"} == {"0"}  # guessed, per suite
    assert all(r["messages"][-1]["content"] != "0" for r in rows if r["suite"] != "edit")


def test_data_build_names_a_source_it_cannot_read_and_leaves_nothing(tmp_path, capsys):
    from harnessrl.cli import main

    zero = [f"data.{k}=0" for k in ("num_sft", "num_prompts", "num_heldout")]
    zero += [f"data.{suite}.{k}=0" for suite in ("long_horizon", "multi_lookup", "hard_lookup")
             for k in ("num_sft", "num_prompts", "num_heldout")]  # fmt: skip
    sources = f"data.sources=[{{name: gone, path: {tmp_path / 'nowhere'}, tasks: {{lookup: 2}}}}]"
    assert main(["data", "build", sources, *zero, "-o", str(tmp_path / "out")]) == 2
    assert "source 'gone':" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no folder, no temp folder beside it
