"""The RL objective: advantages, clipping, truncated IS, KL, and logprobs of exact generated ids."""

from __future__ import annotations

import math

import pytest
import torch

from harnessrl.config import ArchConfig
from harnessrl.model.checkpoint import build_from_arch
from harnessrl.rl.loop import group_advantages
from harnessrl.rl.trainer import Sample, completion_logprobs, pg_loss


def test_grpo_advantages_are_centred_and_scaled_per_group() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    a = group_advantages(r, 4)
    assert a[:4].sum().abs() < 1e-6 and a[0] == pytest.approx(1.5, abs=1e-3)  # (1 - .25) / std .5
    assert torch.all(a[4:] == 0)  # a group that agrees teaches nothing


def test_dr_grpo_advantages_are_only_centred() -> None:
    r = torch.tensor([1.0, 0.0, 0.2, 0.2])
    assert group_advantages(r, 2, "dr_grpo").tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])


def test_on_policy_loss_is_minus_advantage_per_token_and_not_clipped() -> None:
    lp = torch.log(torch.tensor([0.5, 0.25, 0.125]))
    t = pg_loss(lp, lp, lp, advantage=2.0, clip_low=0.2, clip_high=0.28, tis_cap=2.0)
    assert float(t.loss) == pytest.approx(-6.0)
    assert t.clipped == 0 and t.tis_truncated == 0 and t.tis_weight_sum == pytest.approx(3.0) and t.tokens == 3


def test_ratio_is_clipped_asymmetrically_dapo_clip_higher() -> None:
    prox = torch.zeros(2)
    cur = torch.log(torch.tensor([1.5, 0.5]))  # ratios 1.5 and 0.5
    pos = pg_loss(cur, prox, prox, 1.0, clip_low=0.2, clip_high=0.28, tis_cap=None)
    assert float(pos.loss) == pytest.approx(-(1.28 + 0.5))  # upside capped at 1 + clip_high
    neg = pg_loss(cur, prox, prox, -1.0, clip_low=0.2, clip_high=0.28, tis_cap=None)
    assert float(neg.loss) == pytest.approx(1.5 + 0.8)  # downside capped at 1 - clip_low
    assert pos.clipped == 2 and neg.clipped == 2


def test_importance_weight_corrects_engine_mismatch_and_is_truncated() -> None:
    prox = torch.log(torch.tensor([0.5, 0.9]))
    behaviour = torch.log(torch.tensor([0.25, 0.1]))  # weights 2 and 9: the second one is truncated
    t = pg_loss(prox, prox, behaviour, 1.0, 0.2, 0.28, tis_cap=3.0)
    assert float(t.loss) == pytest.approx(-(2.0 + 3.0), rel=1e-5)
    assert t.tis_truncated == 1
    untruncated = pg_loss(prox, prox, behaviour, 1.0, 0.2, 0.28, tis_cap=None)
    assert float(untruncated.loss) == pytest.approx(-11.0, rel=1e-5)


def test_kl_term_is_zero_at_the_reference_and_positive_away_from_it() -> None:
    cur = torch.log(torch.tensor([0.5, 0.5]))
    at_ref = pg_loss(cur, cur, cur, 0.0, 0.2, 0.28, 2.0, reference=cur.clone(), kl_coef=1.0)
    assert at_ref.kl_sum == pytest.approx(0.0, abs=1e-7)
    ref = torch.log(torch.tensor([0.25, 0.75]))
    away = pg_loss(cur, cur, cur, 0.0, 0.2, 0.28, 2.0, reference=ref, kl_coef=0.5)
    d = ref - cur
    expected = float((torch.exp(d) - d - 1).sum())
    assert away.kl_sum == pytest.approx(expected) and float(away.loss) == pytest.approx(0.5 * expected)


def test_loss_gradient_flows_only_through_current_logprobs() -> None:
    cur = torch.log(torch.tensor([0.5, 0.25])).requires_grad_()
    t = pg_loss(cur, cur.detach(), cur.detach(), 1.0, 0.2, 0.28, 2.0)
    t.loss.backward()
    assert cur.grad.tolist() == pytest.approx([-1.0, -1.0])  # d/dlogp of -ratio * A at ratio 1


@pytest.mark.parametrize("token_budget", [16384, 10])  # one padded batch; micro-batches by length
def test_batched_completion_logprobs_equal_one_sequence_at_a_time(token_budget: int) -> None:
    arch = ArchConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    model = build_from_arch(arch, pad_token_id=1, seed=0).eval()
    samples = [
        Sample([5, 6, 7], [8, 9], [0.0, 0.0], 1.0),
        Sample([5, 6, 7, 10, 11, 12, 13], [14], [0.0], -1.0),
        Sample([20], [21, 22, 23, 24], [0.0] * 4, 0.5),
    ]
    with torch.no_grad():
        batched = completion_logprobs(model, samples, pad_id=1, token_budget=token_budget)
        hot = completion_logprobs(model, samples, pad_id=1, temperature=0.5, token_budget=token_budget)
        for s, got in zip(samples, batched, strict=True):
            ids = torch.tensor([s.prompt + s.completion])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            want = [float(logp[len(s.prompt) - 1 + k, t]) for k, t in enumerate(s.completion)]
            assert got.tolist() == pytest.approx(want, abs=1e-5)
            logp_t = torch.log_softmax(model(input_ids=ids).logits[0].float() / 0.5, dim=-1)
            want_t = [float(logp_t[len(s.prompt) - 1 + k, t]) for k, t in enumerate(s.completion)]
            assert hot[samples.index(s)].tolist() == pytest.approx(want_t, abs=1e-5)
            assert all(x < 0 and math.isfinite(x) for x in got.tolist())


def test_every_turn_of_every_segment_is_a_sample_sharing_the_advantage() -> None:
    """A summary is trained like any other turn, on its own segment's exact prompt, with the trajectory's
    advantage; turns without behaviour logprobs (a scripted policy's) are never trained."""
    from harnessrl.config import Budgets
    from harnessrl.harness.episode import Counts, Outcome, Trajectory, TurnRecord
    from harnessrl.rl.loop import pack, turn_samples

    def turn(i, kind, segment, reused, prompt, ids, lps=True):
        return TurnRecord(index=i, kind=kind, text="t", segment=segment, prompt_reused=reused, prompt_ids=prompt,
                          token_ids=ids, logprobs=[-0.5] * len(ids) if lps else None, policy_s=0.0)  # fmt: skip

    turns = [
        turn(0, "tool_calls", 0, 0, [1, 2, 3], [4, 5]),
        turn(1, "summary", 0, 5, [6, 7], [8]),
        turn(2, "final", 1, 2, [9], [10, 11]),  # the new segment: system and task again, then the summary state
        turn(3, "final", 1, 0, [12], [13], lps=False),
    ]
    traj = Trajectory(task_id="t", messages=[], opening=2, tools=[], turns=turns, counts=Counts(),
                      outcome=Outcome(stop_reason="final"), budgets=Budgets(), wall_s=0, started_at=0)  # fmt: skip
    samples = turn_samples(traj, 0.7)
    assert [(s.prompt, s.completion) for s in samples] == [
        ([1, 2, 3], [4, 5]),
        ([1, 2, 3, 4, 5, 6, 7], [8]),
        ([1, 2, 9], [10, 11]),
    ]
    assert all(s.advantage == 0.7 for s in samples)
    # The control with untrained summaries (train_summaries: false): the summary goes, nothing else
    # changes, and packed, turn 0's sequence is what it was before the summary joined it.
    untrained = turn_samples(traj, 0.7, train_summaries=False)
    assert [(s.prompt, s.completion) for s in untrained] == [([1, 2, 3], [4, 5]), ([1, 2, 9], [10, 11])]
    assert [(s.prompt, s.completion) for s in pack(untrained)] == [([1, 2, 3], [4, 5]), ([1, 2, 9], [10, 11])]


def test_untrained_summaries_need_a_stage_that_summarizes() -> None:
    from harnessrl.config import compose
    from harnessrl.config.compose import ConfigError

    cfg = compose(["stages.long_horizon.train_summaries=false"])
    assert cfg.stages.long_horizon.train_summaries is False and cfg.stages.rl.train_summaries is True
    with pytest.raises(ConfigError, match=r"train_summaries=false masks summary turns, which context policy .none."):
        compose(["stages.rl.train_summaries=false"])


def test_overlong_masking_zeroes_the_gradient_after_the_group_baseline() -> None:
    from harnessrl.config import Budgets, RewardConfig, compose
    from harnessrl.harness.episode import Counts, Outcome, Trajectory
    from harnessrl.rl.loop import reward_components, score
    from harnessrl.rl.rollouts import Rollout
    from harnessrl.tasks.task import Check, Solution, Task

    task = Task(id="t", suite="s", split="train", repo="r", instruction="q", tools=[],
                check=Check(kind="answer", answer="1"), solution=Solution(kind="value"))  # fmt: skip

    def rollout(success, stop):
        traj = Trajectory(task_id="t", messages=[], opening=2, tools=[], turns=[], counts=Counts(turns=2),
                          outcome=Outcome(stop_reason=stop, success=success), budgets=Budgets(), wall_s=0,
                          started_at=0)  # fmt: skip
        return Rollout(task, traj, 0)

    group = [rollout(True, "final"), rollout(False, "final"), rollout(False, "max_summaries"), rollout(True, "final")]
    for r in group:  # as the loop scores each episode when it arrives
        r.trajectory.reward_components = reward_components(r.trajectory, RewardConfig())
    cfg = compose(["recipe=tiny_smoke", "stages.rl.group_size=4"]).stages.rl
    plain, masked = (
        score([group], cfg),
        score([group], cfg.model_copy(update={"overlong_mask": True})),
    )
    assert plain.masked == 0 and plain.advantages[2] < 0
    assert masked.masked == 1 and masked.advantages[2] == 0.0
    assert masked.advantages[[0, 1, 3]].tolist() == plain.advantages[[0, 1, 3]].tolist()  # the baseline kept it


def _scored(groups: list[list[tuple[bool, int]]], reward, **rl) -> object:
    """score() of groups of episodes, each episode given as (solved, malformed turns), under `reward` and
    RL overrides."""
    from harnessrl.config import Budgets, compose
    from harnessrl.harness.episode import Counts, Outcome, Trajectory
    from harnessrl.rl.loop import reward_components, score
    from harnessrl.rl.rollouts import Rollout
    from harnessrl.tasks.task import Check, Solution, Task

    task = Task(id="t", suite="s", split="train", repo="r", instruction="q", tools=[],
                check=Check(kind="answer", answer="1"), solution=Solution(kind="value"))  # fmt: skip

    def rollout(solved: bool, malformed: int) -> Rollout:
        traj = Trajectory(task_id="t", messages=[], opening=2, tools=[], turns=[],
                          counts=Counts(turns=2, malformed_turns=malformed), budgets=Budgets(), wall_s=0, started_at=0,
                          outcome=Outcome(stop_reason="final", success=solved))  # fmt: skip
        traj.reward_components = reward_components(traj, reward)
        return Rollout(task, traj, 0)

    cfg = compose(["recipe=tiny_smoke", f"stages.rl.group_size={len(groups[0])}"]).stages.rl
    scored = [[rollout(*e) for e in g] for g in groups]
    return score(scored, cfg.model_copy(update=rl), drop_malformed=reward.malformed_policy == "drop")


def test_a_dropped_malformed_episode_gets_no_gradient_and_leaves_the_baseline() -> None:
    """reward.malformed_policy=drop: the malformed episode's advantage is 0, and the others' are what
    they would be had it never been sampled; under negative it is pushed down."""
    from harnessrl.config import RewardConfig

    drop = RewardConfig(malformed_policy="drop", malformed=0.0)
    dropped = _scored([[(True, 0), (False, 0), (False, 2), (True, 0)]], drop)
    without = _scored([[(True, 0), (False, 0), (True, 0)]], drop)
    assert dropped.dropped_malformed == 1 and dropped.advantages[2] == 0.0
    assert dropped.advantages[[0, 1, 3]].tolist() == pytest.approx(without.advantages.tolist())
    negative = _scored([[(True, 0), (False, 0), (False, 2), (True, 0)]], RewardConfig())
    assert negative.dropped_malformed == 0 and negative.advantages[2] < 0 < negative.advantages[1]


def test_the_batch_baseline_compares_every_episode_with_the_whole_step() -> None:
    """baseline=batch: one mean over the step, so a group that failed throughout is below it and gets a
    negative advantage, where GRPO's own group mean gives it none."""
    from harnessrl.config import RewardConfig

    groups = [[(True, 0), (True, 0)], [(False, 0), (False, 0)]]  # one prompt always solved, one never
    per_group = _scored(groups, RewardConfig())
    batch = _scored(groups, RewardConfig(), baseline="batch")
    assert per_group.advantages.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert batch.advantages.tolist() == pytest.approx([0.866, 0.866, -0.866, -0.866], abs=1e-3)


def test_completion_entropy_is_the_sampling_distributions_own() -> None:
    """The logged entropy is that of the distribution the tokens were drawn from (with its temperature),
    summed over each completion's positions."""
    arch = ArchConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    model = build_from_arch(arch, pad_token_id=1, seed=0).eval()
    samples = [Sample([5, 6, 7], [8, 9], [0.0, 0.0], 1.0), Sample([20], [21, 22, 23], [0.0] * 3, 0.5)]
    entropy: list[float] = []
    with torch.no_grad():
        completion_logprobs(model, samples, pad_id=1, temperature=0.7, entropy=entropy)
        want = 0.0
        for s in samples:
            logits = model(input_ids=torch.tensor([s.prompt + s.completion])).logits[0].float() / 0.7
            logp = torch.log_softmax(logits[len(s.prompt) - 1 : len(s.prompt) - 1 + len(s.completion)], dim=-1)
            want += float(-(logp.exp() * logp).sum())
    assert len(entropy) == 2 and sum(entropy) == pytest.approx(want, rel=1e-5)
    assert 0 < sum(entropy) / 5 < math.log(300)  # per token, below the uniform distribution's


def test_a_trajectory_packed_into_one_sequence_trains_as_its_turns_do() -> None:
    """One pass per trajectory: turns whose prompt extends the sequence so far (token in, token out)
    are one sample; its per-token logprobs, loss and gradient equal the per-turn samples' within 1e-5,
    while a turn that starts a new segment (after a summary) starts a new sequence."""
    from harnessrl.rl.loop import pack

    arch = ArchConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    model = build_from_arch(arch, pad_token_id=1, seed=0).eval()
    p0 = [5, 6, 7]
    p1 = [*p0, 8, 9, 10, 11]  # turn 0's completion, then a tool's output and the next turn's opening
    p2 = [*p1, 12, 13, 14, 15]
    lps = lambda n: [-0.1 * (k + 1) for k in range(n)]  # behaviour logprobs: any, the same both ways
    turns = [Sample(p0, [8, 9], lps(2), 0.5), Sample(p1, [12], lps(1), 0.5), Sample(p2, [16, 17, 18], lps(3), 0.5),
             Sample([5, 6, 20], [21], lps(1), 0.5)]  # fmt: skip
    packed = pack(turns)
    assert [(s.prompt, s.completion, s.turns) for s in packed] == [
        (p0, [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], 3),
        ([5, 6, 20], [21], 1),
    ]
    assert packed[0].positions() == [0, 1, 4, 8, 9, 10] and packed[0].behaviour == lps(2) + lps(1) + lps(3)
    assert sum(len(s.prompt) + len(s.completion) for s in packed) < sum(
        len(s.prompt) + len(s.completion) for s in turns
    )

    def loss_and_grad(samples):
        model.zero_grad()
        current = completion_logprobs(model, samples, pad_id=1)
        loss = sum(pg_loss(c, c.detach(), torch.tensor(s.behaviour), s.advantage, 0.2, 0.28, 2.0).loss
                   for c, s in zip(current, samples, strict=True))  # fmt: skip
        loss.backward()
        return (
            torch.cat([c.detach() for c in current]),
            float(loss),
            model.model.layers[0].self_attn.q_proj.weight.grad.clone(),
        )

    lp_turns, loss_turns, grad_turns = loss_and_grad(turns)
    lp_packed, loss_packed, grad_packed = loss_and_grad(packed)
    assert lp_packed.tolist() == pytest.approx(lp_turns.tolist(), abs=1e-5)
    assert loss_packed == pytest.approx(loss_turns, abs=1e-5)
    assert torch.allclose(grad_packed, grad_turns, atol=1e-5)
    # The update's normalizers see the same turns and tokens: Dr.GRPO counts turns, GRPO sampled tokens.
    assert sum(s.turns for s in packed) == 4 and sum(len(s.behaviour) for s in packed) == 7


def test_different_advantages_or_a_re_rendered_history_are_never_packed() -> None:
    from harnessrl.rl.loop import pack

    a = Sample([1, 2], [3], [0.0], 1.0)
    assert len(pack([a, Sample([1, 2, 3, 4], [5], [0.0], -1.0)])) == 2  # another trajectory's advantage
    assert len(pack([a, Sample([1, 9, 3, 4], [5], [0.0], 1.0)])) == 2  # the prefix changed: not token in, token out
