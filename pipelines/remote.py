"""Compile the recipe's DAG to KFP v2 IR, and submit it to a Kubeflow Pipelines endpoint.

Compiling builds nothing and writes nothing but the IR: the data version comes from what git tracks,
the data config's DVC pointer (the root's `data.dvc` for the default recipe, else
`data/<name>-<config hash>.dvc`), and the DAG's data step pulls it from
the DVC remote on the cluster. Without a pointer, the data step builds that data config and pushes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from harnessrl.config import Config
from harnessrl.data.build import data_folder
from harnessrl.data.remote import dvc_file
from harnessrl.lineage.manifest import code_hash
from pipelines.dag import DataSource, build_pipeline, pipeline_name
from pipelines.live import build_live_pipeline


def data_source(cfg: Config, root: Path) -> DataSource:
    """The data step's source on a cluster: the pushed version of this data config, if there is one."""
    pointer = dvc_file(data_folder(cfg.data, root), root)
    md5 = yaml.safe_load(pointer.read_text())["outs"][0]["md5"] if pointer.is_file() else ""
    store = json.dumps(cfg.store.model_dump(), sort_keys=True)
    return DataSource(md5=md5, remote=cfg.store.data_remote, store=store)


def compile_pipeline(cfg: Config, out: Path, root: Path) -> DataSource:
    """Write the IR to `out`; returns where its data step will get the data."""
    from kfp import compiler

    source = data_source(cfg, root)
    compiler.Compiler().compile(build_pipeline(cfg, source, code_hash()), str(out))
    return source


def submit(cfg: Config, host: str, experiment: str | None, root: Path, package: Path) -> tuple[str, str]:
    """Compile, then create a run with kfp.Client. Returns (run id, run URL)."""
    import kfp

    compile_pipeline(cfg, package, root)
    client = kfp.Client(host=host)
    result = client.create_run_from_pipeline_package(
        str(package),
        arguments={},
        run_name=f"{pipeline_name(cfg)}",
        experiment_name=experiment or "harnessrl",
    )
    return result.run_id, f"{host.rstrip('/')}/#/runs/details/{result.run_id}"


def live_folder(cfg: Config, live_dir: str) -> str:
    """The live folder the recurring run and `serve` share: it must be on the shared PVC."""
    if cfg.infra.pvc is None:
        raise ValueError(f"infra {cfg.infra.name}: no infra.pvc, so no folder `serve` and the live cycle could share")
    if not live_dir.startswith(cfg.infra.pvc.mount_path.rstrip("/") + "/"):
        raise ValueError(f"--live-dir {live_dir}: not on infra.pvc (mounted at {cfg.infra.pvc.mount_path})")
    return live_dir


def compile_live(cfg: Config, out: Path, root: Path, live_dir: str) -> DataSource:
    """Write the live cycle's IR to `out`."""
    from kfp import compiler

    from harnessrl.live.cycle import check_trainable

    check_trainable(cfg)
    source = data_source(cfg, root)
    compiler.Compiler().compile(build_live_pipeline(cfg, source, code_hash(), live_folder(cfg, live_dir)), str(out))
    return source


def schedule_live(cfg: Config, host: str, experiment: str | None, root: Path, package: Path, live_dir: str) -> str:
    """Compile, then create a recurring run every live.recurring_hours (at most one at a time, no
    catch-up after a pause: a cycle takes what is there). Returns its id."""
    import kfp

    compile_live(cfg, package, root, live_dir)
    client = kfp.Client(host=host)
    exp = client.create_experiment(experiment or "harnessrl")
    job = client.create_recurring_run(
        experiment_id=exp.experiment_id,
        job_name=f"{pipeline_name(cfg)}-live",
        interval_second=cfg.live.recurring_hours * 3600,
        max_concurrency=1,
        no_catchup=True,
        pipeline_package_path=str(package),
        enable_caching=False,
    )
    return job.recurring_run_id
