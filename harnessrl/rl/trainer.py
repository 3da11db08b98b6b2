"""The RL trainer: one step's samples in, a policy-gradient update out.

`trainer.update(samples) -> Update` is the one call the RL loop makes (harnessrl/rl/loop.py). Two
trainers answer it: `LocalTrainer`, a DeepSpeed engine over the policy model in this process, and
`TrainerGroup`, `trainer_world_size` DeepSpeed ranks as a Ray actor group, each a LocalTrainer.

The loss is a token-level clipped policy gradient with a truncated importance-sampling correction,
optionally against a frozen reference model. Three policies meet in one token's loss (the decoupled
form AReaL uses for stale data):
  behaviour  the engine that sampled the token; its logprob came back with the token
  proximal   the trainer's weights at the start of this step (a no-grad forward)
  current    the weights being updated, which move across the step's mini-batches

The PPO ratio current/proximal is clipped (DAPO clip-higher when clip_high > clip_low), so several
mini-batch updates stay near where the step began. The weight proximal/behaviour corrects both
staleness and the numeric mismatch between engine and trainer; it is truncated at `tis_cap`, so one
token the engine found unlikely cannot dominate the batch (truncated IS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from harnessrl.config import RLConfig, TrainConfig
from harnessrl.engines.weights import load_weights, weights_blob
from harnessrl.train.engine import build_engine, load_state, optimizer_step, save_state


@dataclass(frozen=True)
class Sample:
    """What the policy saw, what it generated, and how the reward judged it: one sampled turn, or the
    turns of one context segment packed into one sequence (harnessrl/rl/loop.py: pack).

    `completion` follows `prompt`. `sampled` marks the completion tokens the engine generated (None:
    all of them), each with its behaviour logprob in order; the others (a tool's output, the next turn's
    opening) are context the turn after them saw, never trained. `turns`: how many sampled turns."""

    prompt: list[int]
    completion: list[int]
    behaviour: list[float]  # the engine's logprob of each sampled token
    advantage: float
    sampled: tuple[bool, ...] | None = None
    turns: int = 1

    def positions(self) -> list[int]:
        """Where the sampled tokens are, as indices into `completion`."""
        if self.sampled is None:
            return list(range(len(self.completion)))
        return [i for i, s in enumerate(self.sampled) if s]


def completion_logprobs(
    model: nn.Module,
    samples: list[Sample],
    pad_id: int,
    temperature: float = 1.0,
    token_budget: int = 16384,
    entropy: list[float] | None = None,
) -> list[torch.Tensor]:
    """Per-token logprobs of each sample's sampled tokens under `model` (an HF causal LM, or a DeepSpeed
    engine around one), in the samples' order.

    Samples go through in right-padded micro-batches of similar length, at most `token_budget` padded
    tokens each: right padding leaves every real token's position and causal context as in an
    unpadded forward, and grouping by length wastes little on padding. The output projection runs
    only at sampled positions: prompts and tool outputs (whole files) are most of the tokens, and
    their vocabulary-wide logits would be most of the memory and time. Logits are divided by the
    sampling temperature, as the engine did, so these are the logprobs of the distribution the tokens
    were drawn from, and the IS weight against the engine's compares like with like.

    Given a list, `entropy` gets one entry per sample (in the order computed): the token entropy of
    that same distribution in nats, summed over the sampled tokens, detached. The log-softmax is
    already there, so watching for entropy collapse costs one reduction."""
    hf = getattr(model, "module", model)
    body, head = hf.get_decoder(), hf.get_output_embeddings()
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt) + len(samples[i].completion))
    out: list[torch.Tensor | None] = [None] * len(samples)
    while order:
        width = len(samples[order[0]].prompt) + len(samples[order[0]].completion)
        take = 1
        while take < len(order):
            longest = len(samples[order[take]].prompt) + len(samples[order[take]].completion)
            if (take + 1) * longest > token_budget:
                break
            take, width = take + 1, longest
        chunk, order = order[:take], order[take:]
        ids = torch.full((len(chunk), width), pad_id)
        for row, i in enumerate(chunk):
            seq = samples[i].prompt + samples[i].completion
            ids[row, : len(seq)] = torch.tensor(seq)
        hidden = body(input_ids=ids).last_hidden_state
        for row, i in enumerate(chunk):
            s = samples[i]
            where = torch.tensor(s.positions(), dtype=torch.long)
            at = hidden[row, len(s.prompt) - 1 + where]  # the hidden state before each sampled token
            logp = torch.log_softmax(head(at).float() / temperature, dim=-1)
            out[i] = logp.gather(1, torch.tensor(s.completion)[where][:, None]).squeeze(1)
            if entropy is not None:
                entropy.append(float(-(logp.exp() * logp).sum().detach()))  # a measure: no graph
    return out  # type: ignore[return-value]


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor  # summed over the mini-batch's tokens; the caller divides by the step's normalizer
    clipped: int  # tokens whose ratio was clipped
    tis_truncated: int  # tokens whose IS weight hit the cap
    tis_weight_sum: float
    kl_sum: float
    tokens: int


def pg_loss(
    current: torch.Tensor,
    proximal: torch.Tensor,
    behaviour: torch.Tensor,
    advantage: float,
    clip_low: float,
    clip_high: float,
    tis_cap: float | None,
    reference: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossTerms:
    """One sample's token-level loss, summed over its tokens."""
    ratio = torch.exp(current - proximal)
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    surrogate = torch.min(ratio * advantage, clipped_ratio * advantage)
    weight = torch.exp(proximal - behaviour)
    if tis_cap is not None:
        truncated = int((weight > tis_cap).sum())
        weight = weight.clamp(max=tis_cap)
    else:
        truncated = 0
    loss = -(weight * surrogate)
    kl = torch.zeros(())
    if reference is not None:
        # k3 estimator of KL(current || reference): unbiased, always >= 0, low variance (Schulman).
        d = reference - current
        kl = torch.exp(d) - d - 1
        loss = loss + kl_coef * kl
    return LossTerms(
        loss=loss.sum(),
        clipped=int(((ratio - clipped_ratio).abs() > 1e-6).sum()),
        tis_truncated=truncated,
        tis_weight_sum=float(weight.sum()),
        kl_sum=float(kl.sum()),
        tokens=len(current),
    )


# ----------------------------------------------------------------------------- one process


def trainer_config(cfg: RLConfig, context: int) -> TrainConfig:
    """The RL trainer is the supervised stages' DeepSpeed engine: one optimizer step per mini-batch."""
    return TrainConfig(
        steps=cfg.steps * cfg.minibatches,
        micro_batch_size=1,
        seq_len=context,
        lr=cfg.lr,
        schedule="constant",
        grad_clip=cfg.grad_clip,
        zero_stage=cfg.zero_stage,
    )


@dataclass
class Update:
    """What one step's update measured."""

    grad_norm: float = 0.0  # the largest over the step's mini-batches, before clipping
    tokens: int = 0
    sequences: int = 0  # trained sequences: one per packed context segment (harnessrl/rl/loop.py, pack)
    clipped: int = 0
    tis_truncated: int = 0
    tis_weight_sum: float = 0.0
    kl_sum: float = 0.0
    entropy_sum: float = 0.0  # the current policy's token entropy over the trained tokens, nats

    @classmethod
    def combine(cls, parts: list[Update]) -> Update:
        """The step's measures from its trainer ranks' shares: sums, and the one global grad norm."""
        total = cls(grad_norm=max(p.grad_norm for p in parts))
        for name in ("tokens", "sequences", "clipped", "tis_truncated", "tis_weight_sum", "kl_sum", "entropy_sum"):
            setattr(total, name, sum(getattr(p, name) for p in parts))
        return total


class LocalTrainer:
    """The RL trainer in this process: the DeepSpeed engine over the policy model itself. As rank
    `rank` of `world` (TrainerGroup) it trains on its share of every mini-batch."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, cfg: RLConfig, pad: int, rank: int = 0,
                 world: int = 1) -> None:  # fmt: skip
        from harnessrl.train import distributed

        distributed.setup()
        self.model, self.reference, self.cfg, self.pad, self.rank, self.world = model, reference, cfg, pad, rank, world
        if cfg.activation_checkpointing:
            # The update's loss spans every sampled token of the step, so without it the backward pass
            # keeps each layer's activations for all of them: a 135M model's step of 16 multi-turn
            # episodes passed 24 GB. Recomputed layer by layer instead, the gradient is the same.
            # Generation runs in eval mode, where transformers does not checkpoint.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.engine = build_engine(model, trainer_config(cfg, model.config.max_position_embeddings))

    def update(self, samples: list[Sample]) -> Update:
        """`cfg.minibatches` optimizer steps over this step's samples.

        On `world` data-parallel ranks each mini-batch is split across them, every rank taking
        `rank::world` of it. Each normalizes by the whole mini-batch's tokens and scales by `world`,
        and DeepSpeed averages the ranks' gradients, so the update equals one rank's over the whole
        mini-batch."""
        cfg, pad, rank, world = self.cfg, self.pad, self.rank, self.world
        stats = Update()
        if not samples:
            return stats
        self.model.train()
        chunks = [list(range(len(samples)))[k :: cfg.minibatches] for k in range(cfg.minibatches)]
        mine = [i for c in chunks for i in c[rank::world]]
        with torch.no_grad():
            # With one mini-batch the weights at the start of the step are the weights being updated, so
            # the proximal logprobs are the current ones, detached: no extra forward.
            part = [samples[i] for i in mine]
            proximal: dict[int, torch.Tensor] = {}
            if cfg.minibatches > 1:
                proximal = dict(zip(mine, completion_logprobs(self.model, part, pad, cfg.temperature), strict=True))
            ref: dict[int, torch.Tensor] = {}
            if self.reference is not None:
                ref = dict(zip(mine, completion_logprobs(self.reference, part, pad, cfg.temperature), strict=True))
        for chunk in (c for c in chunks if c):
            idx = chunk[rank::world]
            entropy: list[float] = []
            current = completion_logprobs(self.engine, [samples[i] for i in idx], pad, cfg.temperature, entropy=entropy)
            terms = [
                pg_loss(
                    cur,
                    proximal.get(i, cur.detach()),
                    torch.tensor(samples[i].behaviour),
                    samples[i].advantage,
                    cfg.clip_low,
                    cfg.clip_high,
                    cfg.tis_cap,
                    ref.get(i),
                    cfg.kl_coef,
                )
                for cur, i in zip(current, idx, strict=True)
            ]
            # GRPO (DAPO's token-level form): the mean over the mini-batch's tokens. Dr.GRPO: a constant,
            # so a long answer's tokens weigh as much as a short one's and length carries no hidden bias.
            norm = sum(samples[i].turns for i in chunk) * cfg.max_new_tokens
            if cfg.normalization == "grpo":
                norm = sum(len(samples[i].behaviour) for i in chunk)
            if terms:
                loss = sum(t.loss for t in terms)
            else:  # no share of this mini-batch: join the all-reduce with zeros, through a real forward so that
                # the gradient hooks fire in the model's own order (ZeRO-2 fills its buckets in that order)
                loss = completion_logprobs(self.engine, [samples[chunk[0]]], pad, cfg.temperature)[0].sum() * 0.0
            self.engine.backward(loss * world / norm)
            stats.grad_norm = max(stats.grad_norm, optimizer_step(self.engine, self.model))
            stats.tokens += sum(t.tokens for t in terms)
            stats.sequences += len(terms)
            stats.clipped += sum(t.clipped for t in terms)
            stats.tis_truncated += sum(t.tis_truncated for t in terms)
            stats.tis_weight_sum += sum(t.tis_weight_sum for t in terms)
            stats.kl_sum += sum(t.kl_sum for t in terms)
            stats.entropy_sum += sum(entropy)
        self.model.eval()
        return stats

    def save(self, state_dir: Path, step: int, extra: dict) -> None:
        save_state(self.engine, state_dir, step, extra)

    def load(self, state_dir: Path) -> tuple[int, dict]:
        return load_state(self.engine, state_dir)

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- ranks on Ray


class TrainerRank:
    """Rank `rank` of a TrainerGroup, run as a Ray actor: a LocalTrainer in a torch.distributed group
    (gloo on CPU, NCCL on GPU) that rank 0's address starts. Its methods import what they use: Ray
    ships the class by value, and module globals such as torch's config would not pickle."""

    def __init__(self, rank: int, world: int, model, reference, cfg, pad: int, seed: int, threads: int) -> None:
        import torch

        self.rank, self.world, self.cfg, self.pad, self.seed = rank, world, cfg, pad, seed
        self.model, self.reference = model, reference
        torch.set_num_threads(threads)

    def address(self) -> tuple[str, int]:
        """Where rank 0 listens for the group's rendezvous."""
        import ray

        from harnessrl.serve.process import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, addr: str, port: int) -> None:
        """Join the process group and build this rank's trainer; every rank calls this at once."""
        import os

        import torch

        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0",
                          MASTER_ADDR=addr, MASTER_PORT=str(port))  # fmt: skip
        torch.manual_seed(self.seed)
        if torch.cuda.is_available():  # Ray made this rank's GPU its only visible one
            self.model.cuda()
            if self.reference is not None:
                self.reference.cuda()
        self.trainer = LocalTrainer(self.model, self.reference, self.cfg, self.pad, self.rank, self.world)

    def update(self, samples: list[Sample]) -> Update:
        return self.trainer.update(samples)

    def weights(self) -> bytes:
        return weights_blob(self.model)

    def save(self, state_dir: str, step: int, extra: dict) -> None:
        self.trainer.save(Path(state_dir), step, extra)

    def load(self, state_dir: str) -> tuple[int, dict]:
        return self.trainer.load(Path(state_dir))


class TrainerGroup:
    """The trainer as `cfg.trainer_world_size` ranks; the same methods as LocalTrainer.

    Every step, each rank takes its share of every mini-batch, the engines average the gradients,
    and all step alike. Rank 0's weights then come back to the driver's copy of the model, which the
    rollout engines and the final checkpoint read, as LocalTrainer's model would be. On KubeRay the
    ranks land on the trainer worker group by RL's `placement.trainer` (e.g. `{trainer: 1, GPU: 1}`:
    one GPU each, which Ray makes the rank's only visible device)."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, cfg: RLConfig, pad: int, seed: int,
                 threads: int = 1) -> None:  # fmt: skip
        import ray  # only here: a sync run never imports Ray

        from harnessrl.rl.fleet import actor_options

        if not ray.is_initialized():
            raise RuntimeError("stages.*.trainer_world_size > 1 needs Ray: the async fleet starts it")
        self.model, self.world = model, cfg.trainer_world_size
        actor = ray.remote(TrainerRank).options(**actor_options(cfg.placement.trainer))
        shared = ray.put(model), ray.put(reference)  # one copy in the object store for every rank
        self.ranks = [actor.remote(r, self.world, *shared, cfg, pad, seed, threads) for r in range(self.world)]
        try:
            addr, port = ray.get(self.ranks[0].address.remote())
            ray.get([rank.setup.remote(addr, port) for rank in self.ranks])
        except BaseException:
            self.close()
            raise

    def update(self, samples: list[Sample]) -> Update:
        import ray

        parts = ray.get([rank.update.remote(samples) for rank in self.ranks])
        load_weights(self.model, ray.get(self.ranks[0].weights.remote()))
        return Update.combine(parts)

    def save(self, state_dir: Path, step: int, extra: dict) -> None:
        import ray

        ray.get([rank.save.remote(str(state_dir), step, extra) for rank in self.ranks])  # a collective save

    def load(self, state_dir: Path) -> tuple[int, dict]:
        import ray

        loaded = ray.get([rank.load.remote(str(state_dir)) for rank in self.ranks])
        if loaded[0][0]:
            load_weights(self.model, ray.get(self.ranks[0].weights.remote()))
        return loaded[0]

    def close(self) -> None:
        import ray

        for rank in self.ranks:
            ray.kill(rank)


Trainer = LocalTrainer | TrainerGroup
