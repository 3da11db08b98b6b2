"""The DeepSpeed engine from a TrainConfig: ZeRO 0-3, fp32 or bf16, accumulation, schedule, clipping.

The optimizer is a client `torch.optim.AdamW`: it works at every ZeRO stage on CPU and GPU, and
avoids JIT-compiling fused Adam on CPU. The schedule is a LambdaLR over `lr_at`, which DeepSpeed
steps once per optimizer step.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harnessrl.config import TrainConfig
from harnessrl.train.schedule import lr_at


def ds_config(cfg: TrainConfig) -> dict:
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "bf16": {"enabled": cfg.precision == "bf16"},
        "zero_optimization": {"stage": cfg.zero_stage, "stage3_gather_16bit_weights_on_model_save": True},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def build_engine(model: torch.nn.Module, cfg: TrainConfig):
    import deepspeed

    opt = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_at(step, cfg) / cfg.lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=ds_config(cfg))
    return engine


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """The optimizer's groups: the token embeddings (input and output, one tensor when tied) at
    `embed_lr` where set, everything else at `lr`. A group's rate is its base rate times the schedule's
    factor, so both follow one schedule."""
    params = list(model.parameters())  # a tied tensor appears once
    if cfg.embed_lr is None:
        return [{"params": params, "lr": cfg.lr}]
    out = model.get_output_embeddings()
    embeds = {id(model.get_input_embeddings().weight)} | ({id(out.weight)} if out is not None else set())
    return [
        {"params": [p for p in params if id(p) not in embeds], "lr": cfg.lr},
        {"params": [p for p in params if id(p) in embeds], "lr": cfg.embed_lr},
    ]


def optimizer_step(engine, model: torch.nn.Module, boundary: bool = True) -> float | None:
    """engine.step(); at an accumulation boundary, also the global grad norm before clipping.
    DeepSpeed keeps that norm only under ZeRO; without ZeRO it clips fp32 grads in place and keeps
    nothing, so the norm is measured here first."""
    plain = None
    if boundary and engine.zero_optimization_stage() == 0:
        plain = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))
    engine.step()  # applies the update at the accumulation boundary only
    if not boundary:
        return None
    return plain if plain is not None else float(engine.get_global_grad_norm() or 0.0)


def save_state(engine, state_dir: Path, step: int, extra: dict | None = None) -> None:
    """Full training state (weights, optimizer, scheduler, step, and the caller's `extra`, such as an
    RNG state) for an exact resume. DeepSpeed writes `latest` after the files, so a kill mid-save
    leaves the previous state as the newest complete one."""
    engine.save_checkpoint(str(state_dir), tag=f"step{step}", client_state={"step": step, "extra": extra or {}})


def load_state(engine, state_dir: Path) -> tuple[int, dict]:
    """Resume from the newest complete state in state_dir: (the step to continue from, the saved
    `extra`); (0, {}) if there is none."""
    if not (state_dir / "latest").is_file():
        return 0, {}
    _, client = engine.load_checkpoint(str(state_dir), load_module_strict=True)
    return int(client["step"]), client.get("extra", {})


def export_hf(engine, model, tok, out: Path, rank: int) -> None:
    """Hugging Face safetensors of the trained weights, written by rank 0.

    Under ZeRO-3 each rank holds a shard, so every rank joins the gather; ZeRO 0-2 keep full weights.
    """
    state = engine._zero3_consolidated_16bit_state_dict() if engine.zero_optimization_stage() == 3 else None
    if rank == 0:
        from harnessrl.model.checkpoint import save

        save(model, tok, out, state)
