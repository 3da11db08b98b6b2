"""What the stages that run as Kubernetes jobs share (TrainJob: trainjob.py, RayJob: rayjob.py).

KFP v2 has no ResourceOp. As in kubeflow/pipelines' pytorch-launcher sample, a stage's own pod creates
the custom resource with the Kubernetes client and waits on its status:

1. `job_folder`: the job's folder on the shared PVC, which every pod of the job mounts, holds the
   data, the parent checkpoint and the job's spec; its `out` is where the job writes. The training
   state sits beside it (`<name>.state`), so a stage that KFP retries resumes where it was killed.
2. the stage creates the object, and `wait` reads it until its verdict is in. A failure raises with
   the object's reason. Past the deadline, or when KFP cancels the stage (SIGTERM to its pod), the
   object is deleted first, so no GPUs stay held by a stage that gave up.
3. `publish`: the job's checkpoint and metrics move into the stage's output, whose manifest the
   stage then writes as for any stage, and the folder is removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessrl.config import PVCConfig, SecretEnv
from harnessrl.stage import StageContext

Verdict = Callable[[dict], tuple[bool | None, str]]  # (done ok, failed, or None while running; text)


def job_name(stage: str, out: Path) -> str:
    """A DNS label, unique per stage output (KFP gives every task run its own output path)."""
    return f"harnessrl-{stage.replace('_', '-')}-{hashlib.sha256(str(out).encode()).hexdigest()[:10]}"


def sayer(stage: str) -> Callable[[str], None]:
    return lambda text: print(f"[{stage}] {text}", flush=True)


def secret_env(secrets: list[SecretEnv]) -> list[dict]:
    """Container env entries that read the recipe's secrets (e.g. S3 keys), as Kubernetes writes them."""
    return [{"name": var, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": key}}}
            for s in secrets for key, var in s.env.items()]  # fmt: skip


def job_folder(pvc: PVCConfig, name: str, ctx: StageContext) -> StageContext:
    """The job's folder on the shared PVC with the stage's inputs copied in: the context its pods run."""
    folder = Path(pvc.mount_path) / "harnessrl-jobs" / name
    shutil.rmtree(folder, ignore_errors=True)  # a retried stage copies its inputs afresh...
    shutil.copytree(ctx.data_dir, folder / "data")
    if ctx.parent is not None:
        shutil.copytree(ctx.parent, folder / "parent")
    (folder / "out").mkdir()
    return StageContext(
        cfg=ctx.cfg,
        parent=folder / "parent" if ctx.parent is not None else None,
        out=folder / "out",
        data_dir=folder / "data",
        state_dir=folder.with_name(f"{name}.state"),  # ...but resumes from the state its killed try saved
    )


def publish(job_ctx: StageContext, ctx: StageContext, spec: Path, result: Path, what: str) -> dict:
    """Move what the job wrote into the stage's output; returns the metrics it reported."""
    if not result.is_file():
        raise RuntimeError(f"{what} succeeded but wrote no {result.name}: its driver or rank 0 did not finish")
    metrics = json.loads(result.read_text())
    spec.unlink()
    result.unlink()
    shutil.copytree(job_ctx.out, ctx.out, dirs_exist_ok=True)
    shutil.rmtree(job_ctx.out.parent, ignore_errors=True)
    if job_ctx.state_dir is not None:  # the checkpoint is complete: its resume state is spent
        shutil.rmtree(job_ctx.state_dir, ignore_errors=True)
    return metrics


def kube_api() -> Any:
    """The Kubernetes custom-objects API: the pod's service account in a cluster, else the kube context."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, FileNotFoundError) as e:
            raise RuntimeError(f"no Kubernetes context to create the job in (in-cluster or kubeconfig): {e}") from e
    return client.CustomObjectsApi()


class Cancelled(Exception):
    """KFP cancelled the stage (SIGTERM to its pod)."""


def wait(api: Any, ref: tuple[str, str, str, str, str], verdict: Verdict, deadline_s: float, poll_s: float,
         say: Callable[[str], None]) -> None:  # fmt: skip
    """Read the object `ref` (group, version, namespace, plural, name) until `verdict` says it is done.
    Raises RuntimeError when it failed (with why), TimeoutError past `deadline_s` (0: none) and
    Cancelled on SIGTERM; the object is deleted on the last two."""
    group, version, namespace, plural, name = ref
    started, last = time.time(), None

    def on_term(signum: int, frame: Any) -> None:
        raise Cancelled(f"stage cancelled (signal {signum})")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            ok, text = verdict(api.get_namespaced_custom_object(group, version, namespace, plural, name))
            if ok is True:
                return
            if ok is False:
                raise RuntimeError(f"{plural[:-1]} {namespace}/{name} failed: {text}")
            if text != last:
                say(f"{name}: {text}")
                last = text
            if deadline_s and time.time() - started > deadline_s:
                raise TimeoutError(f"{plural[:-1]} {namespace}/{name} did not finish in {deadline_s:.0f} s")
            time.sleep(poll_s)
    except (TimeoutError, Cancelled, KeyboardInterrupt):
        api.delete_namespaced_custom_object(group, version, namespace, plural, name)
        say(f"{name}: deleted")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
