"""`harnessrl infra import`: the cluster Terraform built, as harnessrl config groups.

`terraform -chdir=infra/terraform/aws output -json` holds `harnessrl_config`, the keys the cluster
decides (bucket, pipeline root, PVC, secret, each stage's node pool and tolerations). They are laid
over a base infra config that holds what Terraform does not decide (the image, GPU counts, CPU,
memory, timeouts, the TrainJob and RayJob settings), and written as `conf/infra/<name>.yaml` and
`conf/store/<name>.yaml`, each validated by the same pydantic models as every recipe. Then
`harnessrl submit recipe=qwen_coder_7b infra=<name> store=<name>` runs on that cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harnessrl.config import InfraConfig, StoreConfig
from harnessrl.io import atomic_write_text


class InfraImportError(ValueError):
    """Bad input to the import: a missing output, or a result the config models refuse. One line."""


def output_value(outputs: dict, key: str) -> Any:
    """A value of `terraform output -json`: {key: {"value": ..., "type": ..., "sensitive": ...}}."""
    if key not in outputs or not isinstance(outputs[key], dict) or "value" not in outputs[key]:
        raise InfraImportError(f"no output {key!r} in the terraform outputs (run `terraform output -json` in "
                           "infra/terraform/aws after `terraform apply`)")  # fmt: skip
    return outputs[key]["value"]


def overlay(base: dict, top: dict) -> dict:
    """`top` laid over `base`, dicts merged key by key; lists and values from `top` replace."""
    out = dict(base)
    for k, v in top.items():
        out[k] = overlay(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _validated(model: type, data: dict, group: str, exclude_defaults: bool = False) -> dict:
    try:
        return model.model_validate(data).model_dump(mode="json", exclude_defaults=exclude_defaults)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InfraImportError(f"{group}.{where}: {err['msg']}") from None


def _repool(rayjob: dict, base: dict, imported: dict) -> dict:
    """The RayJob's groups on the cluster's pools: a group that the base puts on the same pool as some
    stage goes where the import puts that stage (its node selector and tolerations)."""
    moves = {}
    for stage, res in base.items():
        selector = _pool_key(res.get("node_selector", {}))
        if stage in imported and selector not in moves:
            moves[selector] = {k: imported[stage].get(k, []) for k in ("node_selector", "tolerations")}
    groups = {"head": rayjob["head"], **rayjob["workers"]}
    moved = {n: g | moves.get(_pool_key(g.get("node_selector", {})), {}) for n, g in groups.items()}
    return rayjob | {"head": moved.pop("head"), "workers": moved}


def _pool_key(selector: dict) -> str:
    """A node selector as a dict key."""
    return yaml.safe_dump(selector, sort_keys=True)


def build(outputs: dict, name: str, conf_dir: Path, base: str) -> dict[str, dict]:
    """{"infra": ..., "store": ...}: the two config groups for this cluster, validated."""
    rendered = output_value(outputs, "harnessrl_config")
    rendered = yaml.safe_load(rendered) if isinstance(rendered, str) else rendered
    base_file = conf_dir / "infra" / f"{base}.yaml"
    if not base_file.is_file():
        raise InfraImportError(f"--base {base}: no {base_file}")
    base_infra = yaml.safe_load(base_file.read_text())
    infra = overlay(base_infra, rendered.get("infra", {})) | {"name": name}
    if infra.get("rayjob"):
        infra["rayjob"] = _repool(infra["rayjob"], base_infra.get("resources", {}), infra["resources"])
    s3 = {k: v for k, v in yaml.safe_load((conf_dir / "store" / "s3.yaml").read_text()).items() if k != "defaults"}
    store = overlay(StoreConfig().model_dump() | s3, rendered.get("store", {}))
    # As conf/ holds them: the infra whole, as gpu_cluster.yaml (its parts are absent by default, so
    # each key is overridable only where the file states it); the store without its defaults, which
    # compose already hands to Hydra (tests/test_config_defaults.py).
    return {"infra": _validated(InfraConfig, infra, "infra"), "store": _validated(StoreConfig, store, "store", True)}


def write(groups: dict[str, dict], name: str, conf_dir: Path, force: bool, source: str) -> list[Path]:
    """Write conf/{infra,store}/<name>.yaml; a file that exists with other content needs `force`."""
    header = f"# Written by `harnessrl infra import` from {source}: import again rather than edit.\n"
    texts = {conf_dir / g / f"{name}.yaml": header + yaml.safe_dump(v, sort_keys=False) for g, v in groups.items()}
    clash = [p for p, text in texts.items() if p.is_file() and p.read_text() != text]
    if clash and not force:
        raise InfraImportError(f"{clash[0]} exists with other content; pass --force to replace it")
    for path, text in texts.items():
        atomic_write_text(path, text)
    return list(texts)
