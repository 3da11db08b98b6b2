"""Compile the recipe's DAG to KFP v2 IR, and submit it to a Kubeflow Pipelines endpoint.

Compiling builds nothing and writes nothing but the IR: the data version comes from what git tracks,
the data config's DVC pointer (`data/<name>-<config hash>.dvc`), and the DAG's data step pulls it from
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


def data_source(cfg: Config, root: Path) -> DataSource:
    """The data step's source on a cluster: the pushed version of this data config, if there is one."""
    pointer = dvc_file(data_folder(cfg.data, root))
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
