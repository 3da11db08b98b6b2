"""What the stages that run as Kubernetes jobs share (TrainJob: trainjob.py, RayJob: rayjob.py).

KFP v2 has no ResourceOp. As in kubeflow/pipelines' pytorch-launcher sample, a stage's own pod creates
the custom resource with the Kubernetes client and waits on its status:

1. `job_folder`: the job's folder on the shared PVC, which every pod of the job mounts, holds the
   data, the parent checkpoint and the job's spec; its `out` is where the job writes. The training
   state sits beside it (`<name>.state`), so a stage that KFP retries resumes where it was killed.
2. `run_job` creates the object and reads it until its verdict is in. A failure raises with the
   object's reason. Past the deadline, when KFP cancels the stage (SIGTERM to its pod), or when the
   API keeps failing, the object is deleted first, so no GPUs stay held by a stage that gave up.
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


def job_name(stage: str, ctx: StageContext) -> str:
    """A DNS label for the stage's job, the same on every try of one stage run: it comes from the stage's
    resume-state key (harnessrl/stage.py), not from the output folder each try writes into."""
    key = str(ctx.state_dir or ctx.out)
    return f"harnessrl-{stage.replace('_', '-')}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def sayer(stage: str) -> Callable[[str], None]:
    return lambda text: print(f"[{stage}] {text}", flush=True)


def secret_env(secrets: list[SecretEnv]) -> list[dict]:
    """Container env entries that read the recipe's secrets (e.g. S3 keys), as Kubernetes writes them."""
    return [{"name": var, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": key}}}
            for s in secrets for key, var in s.env.items()]  # fmt: skip


def job_folder(pvc: PVCConfig, name: str, ctx: StageContext) -> StageContext:
    """The job's folder on the shared PVC with the stage's inputs copied in: the context its pods run.
    A context without a data folder (the data step's own job, which builds it) gets none."""
    folder = Path(pvc.mount_path) / "harnessrl-jobs" / name
    shutil.rmtree(folder, ignore_errors=True)  # a retried stage copies its inputs afresh...
    if ctx.data_dir is not None:
        shutil.copytree(ctx.data_dir, folder / "data")
    if ctx.parent is not None:
        shutil.copytree(ctx.parent, folder / "parent")
    (folder / "out").mkdir(parents=True)
    return StageContext(
        cfg=ctx.cfg,
        parent=folder / "parent" if ctx.parent is not None else None,
        out=folder / "out",
        data_dir=folder / "data" if ctx.data_dir is not None else None,
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


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def pod_owner(namespace: str, core: Any = None, sa_dir: Path = SERVICE_ACCOUNT) -> dict | None:
    """An ownerReference to the pod this stage runs in, when it runs in `namespace` on a cluster: the
    job then goes with the pod, so a stage pod killed outright (OOM, a lost node) orphans nothing.
    None elsewhere (a laptop, or a job in another namespace, which Kubernetes cannot own across)."""
    import os

    if not (sa_dir / "namespace").is_file() or (sa_dir / "namespace").read_text().strip() != namespace:
        return None
    if core is None:
        from kubernetes import client

        core = client.CoreV1Api()
    pod = core.read_namespaced_pod(os.environ["HOSTNAME"], namespace)  # a pod's hostname is its name
    return {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}


class Cancelled(Exception):
    """KFP cancelled the stage (SIGTERM to its pod)."""


TRANSIENT = (429, 500, 502, 503, 504)  # API answers worth another read, not a failed stage


def run_job(api: Any, ref: tuple[str, str, str, str, str], body: dict, verdict: Verdict, deadline_s: float,
            poll_s: float, say: Callable[[str], None], owner: dict | None = None) -> None:  # fmt: skip
    """Create the object `ref` (group, version, namespace, plural, name) from `body` and read it until
    `verdict` says it is done. Raises RuntimeError when it failed (with why), TimeoutError past
    `deadline_s` (0: none), Cancelled on SIGTERM, or the API's error. On every way out but success or
    its own failure the object is deleted, so no GPUs stay held by a stage that gave up. An object of
    the same name left by a killed try of this stage is replaced."""
    group, version, namespace, plural, name = ref
    what = f"{plural[:-1]} {namespace}/{name}"
    if owner is not None:
        body = body | {"metadata": body["metadata"] | {"ownerReferences": [owner]}}
    started, last, errors = time.time(), None, 0

    def on_term(signum: int, frame: Any) -> None:
        raise Cancelled(f"stage cancelled (signal {signum})")

    previous = signal.signal(signal.SIGTERM, on_term)  # before create: a cancel never orphans the job
    try:
        try:
            api.create_namespaced_custom_object(group, version, namespace, plural, body)
        except Exception as e:
            if getattr(e, "status", None) != 409:
                raise
            say(f"{name}: left by an earlier try; replacing it")
            _delete(api, ref, say)
            api.create_namespaced_custom_object(group, version, namespace, plural, body)
        while True:
            try:
                obj = api.get_namespaced_custom_object(group, version, namespace, plural, name)
                errors = 0
            except Exception as e:
                if getattr(e, "status", None) not in TRANSIENT or errors >= 10:
                    raise
                errors += 1
                say(f"{name}: reading its status failed ({getattr(e, 'status', '?')}), retrying")
                time.sleep(poll_s * errors)
                continue
            ok, text = verdict(obj)
            if ok is True:
                return
            if ok is False:  # kept for its logs and events; Kubernetes' own TTLs clean it up
                raise JobFailed(f"{what} failed: {text}")
            if text != last:
                say(f"{name}: {text}")
                last = text
            if deadline_s and time.time() - started > deadline_s:
                raise TimeoutError(f"{what} did not finish in {deadline_s:.0f} s")
            time.sleep(poll_s)
    except JobFailed:
        raise
    except BaseException:
        _delete(api, ref, say)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


class JobFailed(RuntimeError):
    """The job itself reported failure."""


def _delete(api: Any, ref: tuple[str, str, str, str, str], say: Callable[[str], None]) -> None:
    """Best effort: a delete that fails must not hide why the stage is stopping."""
    group, version, namespace, plural, name = ref
    try:
        api.delete_namespaced_custom_object(group, version, namespace, plural, name)
        say(f"{name}: deleted")
    except Exception as e:
        if getattr(e, "status", None) != 404:
            say(f"{name}: could not delete it ({type(e).__name__}: {e}); delete it by hand")
