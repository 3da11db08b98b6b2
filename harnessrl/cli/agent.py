"""`harnessrl agent`: the agent on a real repository, in the harness its checkpoint was trained in."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from harnessrl.cli.common import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from harnessrl.harness.spec import HarnessSpec


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "agent",
        help="run the agent on a real repository with the production harness",
        description="Run one episode on a copy of REPO in the harness the checkpoint was trained in (its "
        "harness.json: tools, system prompt, budgets, context policy), with sandboxed commands, streaming "
        "each model turn and tool result, then print the diff of what the agent changed. A checkpoint "
        "trained in no harness gets every tool. Flags override the trained harness on purpose.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, metavar="PATH", help="a local Hugging Face checkpoint folder")
    src.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible chat endpoint, e.g. a vLLM server")
    p.add_argument("--served-model", help="model name to ask the endpoint for (default: the first it lists)")
    p.add_argument(
        "--harness",
        type=Path,
        metavar="PATH",
        help="with --endpoint: the checkpoint folder (or harness.json) whose harness to present",
    )
    p.add_argument("--repo", type=Path, required=True, metavar="DIR", help="the repository to work on (copied)")
    p.add_argument("instruction", help="what the agent should do")
    p.add_argument("--tools", help="comma-separated tools, replacing the trained set (warns when it differs)")
    p.add_argument("--context", choices=["none", "truncate", "summarize"], help="context policy (default: trained)")
    p.add_argument("--context-budget", type=int, metavar="N", help="context tokens (default: trained, or the model's)")
    p.add_argument(
        "--summary-trigger", type=int, metavar="N", help="summarize at N context tokens (default: 3/4 of the budget)"
    )
    p.add_argument(
        "--summary-max-tokens", type=int, metavar="N", help="cap on one summary (default: trained, or budget/8)"
    )
    p.add_argument("--max-turns", type=int, help="default: the trained harness's")
    p.add_argument("--max-new-tokens", type=int, help="per turn (default: the trained harness's)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")


def cmd_agent(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harnessrl.agent import production_harness, run_agent
    from harnessrl.harness.spec import HarnessFileError, load_harness
    from harnessrl.harness.tools import ALL_TOOLS

    def bad(msg: str) -> int:
        print(f"harnessrl: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT

    if not args.repo.is_dir():
        return bad(f"--repo {args.repo}: no such directory")
    if args.harness is not None and args.model is not None:
        return bad("--harness is for --endpoint; a --model checkpoint brings its own harness.json")
    if args.harness is not None and not args.harness.exists():
        return bad(f"--harness {args.harness}: no such file or directory")
    count_tokens, context_len = None, None
    if args.model is not None:
        from harnessrl.engines.policy import HFPolicy
        from harnessrl.model.checkpoint import CheckpointError, load

        try:
            model, tok = load(args.model)
        except CheckpointError as e:
            return bad(f"--model {e}")
        policy = HFPolicy(model, tok, args.temperature)
        count_tokens, context_len = policy.renderer.count, policy.renderer.context
    else:
        from harnessrl.engines.openai_client import ChatEndpointPolicy, EndpointError, served_model

        try:
            name = args.served_model or served_model(args.endpoint, api_key=os.environ.get("HARNESSRL_API_KEY"))
        except EndpointError as e:
            return bad(f"--endpoint: {e}")
        # A plain request, as any client's: the checkpoint's own serving metadata must do the rest. The
        # session id ties this episode's turns together in `harnessrl serve`'s log, for feedback.
        session = f"agent-{uuid.uuid4().hex}"
        print(f"session {session}", file=sys.stderr)
        policy = ChatEndpointPolicy(args.endpoint, name, args.temperature, token_ids=False, session_id=session,
                                    api_key=os.environ.get("HARNESSRL_API_KEY"))  # fmt: skip
    try:
        trained = load_harness(args.model or args.harness) if (args.model or args.harness) else None
        harness = _agent_harness(args, production_harness(trained), context_len)
    except (HarnessFileError, ValidationError, ValueError) as e:
        return bad(str(e))
    if args.endpoint:  # the server's tool_calls become text in the model's format
        policy.fmt = harness.fmt
    if trained is None:
        print(f"note: no harness.json; the agent gets every tool ({', '.join(ALL_TOOLS)})", file=sys.stderr)
    elif harness.tools != trained.tools:
        print(f"warning: --tools {','.join(harness.tools)} differs from the trained harness "
              f"({','.join(trained.tools)}): the model was never trained with this set", file=sys.stderr)  # fmt: skip
    traj, diff = run_agent(policy, args.repo, args.instruction, harness, count_tokens=count_tokens)
    c = traj.counts
    print(f"\n{traj.outcome.stop_reason}: {traj.outcome.final_answer or ''}")
    print(f"turns {c.turns}, tool calls {c.tool_calls}, malformed {c.malformed_turns}, summaries {c.summaries}")
    print(diff or "(no changes)")
    return 0


def _agent_harness(args: argparse.Namespace, harness: HarnessSpec, context_len: int | None) -> HarnessSpec:
    """The harness the agent runs in: the trained one, with what the flags change."""
    from pydantic import ValidationError

    from harnessrl.config import ContextConfig
    from harnessrl.harness.spec import system_prompt
    from harnessrl.harness.tools import select

    update: dict = {}
    if args.tools:
        tools = [n.strip() for n in args.tools.split(",") if n.strip()]
        try:
            select(tools)
        except KeyError as e:
            raise ValueError(f"--tools: {e.args[0]}") from None
        update["tools"] = tools
        if harness.system_prompt == system_prompt(harness.tools):  # the training prompt names its tools
            update["system_prompt"] = system_prompt(tools)
    trained = harness.budgets.context
    policy = args.context or trained.policy
    context = ContextConfig()
    if policy != "none":
        budget = args.context_budget or trained.budget or context_len
        if budget is None:
            raise ValueError(
                f"--context {policy} with --endpoint needs --context-budget (in the served model's tokens)"
            )
        same = trained.policy == "summarize" and not args.context_budget  # keep the trained trigger and cap
        try:
            context = ContextConfig(
                policy=policy,
                budget=budget,
                trigger=(args.summary_trigger or (trained.trigger if same else budget * 3 // 4))
                if policy == "summarize" else None,
                summary_max_tokens=args.summary_max_tokens or (trained.summary_max_tokens if same else max(1, budget // 8)),
                max_summaries=trained.max_summaries,
            )  # fmt: skip
        except ValidationError as e:
            raise ValueError(f"--context {policy}: {e.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    per_turn = args.max_new_tokens or harness.budgets.max_turn_tokens
    turns = args.max_turns or harness.budgets.max_turns
    episode_tokens = max(harness.budgets.max_tokens, turns * per_turn)
    changed = {"max_turns": turns, "max_turn_tokens": per_turn, "max_tokens": episode_tokens, "context": context}
    update["budgets"] = harness.budgets.model_copy(update=changed)
    return harness.model_copy(update=update)
