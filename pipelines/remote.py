"""Compile the recipe's DAG to KFP v2 IR, and submit it to a Kubeflow Pipelines endpoint."""

from __future__ import annotations

from pathlib import Path

from harnessrl.config import Config
from harnessrl.lineage.manifest import code_hash
from pipelines.dag import Inputs, build_pipeline, pipeline_name
from pipelines.local import ensure_data


def compile_pipeline(cfg: Config, out: Path, data_root: Path) -> Path:
    from kfp import compiler

    data_dir, data_md5 = ensure_data(cfg, data_root)
    # On the cluster the data folder sits at the same relative path in the image's working dir.
    tasks_data_dir = cfg.data.dir if not Path(cfg.data.dir).is_absolute() else str(data_dir)
    compiler.Compiler().compile(build_pipeline(cfg, Inputs(tasks_data_dir, data_md5, code_hash())), str(out))
    return out


def submit(cfg: Config, host: str, experiment: str | None, data_root: Path, package: Path) -> tuple[str, str]:
    """Compile, then create a run with kfp.Client. Returns (run id, run URL)."""
    import kfp

    compile_pipeline(cfg, package, data_root)
    client = kfp.Client(host=host)
    result = client.create_run_from_pipeline_package(
        str(package),
        arguments={},
        run_name=f"{pipeline_name(cfg)}",
        experiment_name=experiment or "harnessrl",
    )
    return result.run_id, f"{host.rstrip('/')}/#/runs/details/{result.run_id}"
