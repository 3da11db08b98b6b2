"""The DAG's data step building the data as a RayJob (components/data.py, harnessrl/cluster/rayjob.py)
when the recipe's infra has `rayjob`: the RayJob it creates (the data driver, the head and the CPU-only
worker groups, the PVC), and the create-and-wait against the fake Kubernetes API of
tests/test_cluster_rayjob.py, whose driver runs the real entrypoint as a local process."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from components.data import work
from harnessrl.cluster import rayjob
from harnessrl.config import StoreConfig, compose
from harnessrl.data.md5 import dvc_dir_md5
from pipelines.routing import data_rayjob
from tests.test_cluster_rayjob import FakeKube, on_cluster

pytestmark = pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")  # dvc's, not ours
# The smoke recipe's data, smaller still: its generated repos and one real source (hydra), whose
# mining is the Ray task.
SMALL = ["data.num_sft=8", "data.num_prompts=8", "data.num_heldout=4", "data.long_horizon.num_sft=2",
         "data.long_horizon.num_prompts=2", "data.long_horizon.num_heldout=2"]  # fmt: skip


@pytest.fixture(autouse=True)
def dvc_site_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))


def test_the_data_rayjob_keeps_the_head_and_the_cpu_only_groups() -> None:
    cfg = compose(["recipe=qwen_coder_7b"])
    job = data_rayjob(cfg)
    assert set(cfg.infra.rayjob.workers) == {"trainer", "rollout", "env"}
    assert list(job.rayjob.workers) == ["env"] and job.rayjob.head == cfg.infra.rayjob.head  # no GPU node held
    assert job.timeout_s == cfg.infra.for_stage("data").timeout_s and job.pvc == cfg.infra.pvc
    assert rayjob.groups(job) == "head + env x4" and rayjob.TARGETS["data"] == "components.data:build_on_ray"
    assert data_rayjob(compose(["recipe=tiny"])) is None  # no infra.rayjob: the step builds in its pod
    all_gpu = compose(["recipe=qwen_coder_7b", "+infra.rayjob.workers.env.gpus=1"])
    assert data_rayjob(all_gpu).rayjob.workers == {} and rayjob.groups(data_rayjob(all_gpu)) == "head alone"


def test_the_data_step_builds_in_a_rayjob_pushes_and_hands_the_folder_on(tmp_path: Path, kube_api) -> None:
    api = kube_api(FakeKube("run"))
    pvc = tmp_path / "pvc"
    cfg = compose([*on_cluster(pvc), *SMALL])
    job, remote, out = data_rayjob(cfg), str(tmp_path / "dvc-remote"), tmp_path / "kfp" / "dataset"
    md5 = work(cfg.data, "", "", remote, StoreConfig(), out, job)

    assert md5 == dvc_dir_md5(out) and (out / "prompts.jsonl").is_file() and (out / "sources.json").is_file()
    calls = [c[0] for c in api.calls]
    assert calls[0] == "create" and calls[-1] == "get" and "delete" not in calls
    (name, body), = api.objects.items()  # fmt: skip
    assert name.startswith("harnessrl-data-")
    spec = body["spec"]
    argv = shlex.split(spec["entrypoint"])
    assert argv[:3] == ["python", "-m", "harnessrl.cluster.rayjob"]
    assert argv[3] == f"{pvc}/harnessrl-jobs/{name}/out/.launch.json"
    ray_spec = spec["rayClusterSpec"]
    assert [g["groupName"] for g in ray_spec["workerGroupSpecs"]] == ["env"]  # trainer and rollout hold GPUs
    pods = [
        ray_spec["headGroupSpec"]["template"]["spec"],
        *(g["template"]["spec"] for g in ray_spec["workerGroupSpecs"]),
    ]
    for pod in pods:
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "harnessrl-models"}} in pod["volumes"]
        assert {"name": "shared", "mountPath": str(pvc)} in pod["containers"][0]["volumeMounts"]
        assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert spec["activeDeadlineSeconds"] == cfg.infra.for_stage("data").timeout_s
    # The folder left the PVC, and the step's scratch is gone: only the artifact remains.
    assert list((pvc / "harnessrl-jobs").iterdir()) == []
    assert [p.name for p in out.parent.iterdir()] == ["dataset"]
    # What was pushed is that version: the next run's data step pulls it by md5.
    again = tmp_path / "run2" / "dataset"
    assert work(cfg.data, md5, "", remote, StoreConfig(), again) == md5 and dvc_dir_md5(again) == md5


def test_a_failed_data_driver_fails_the_step_naming_the_rayjob(tmp_path: Path, kube_api, capsys) -> None:
    api = kube_api(FakeKube("running-after-failure"))
    # No worker group without GPUs: the RayJob is the head alone, and the step says so.
    cfg = compose([*on_cluster(tmp_path / "pvc"), "+infra.rayjob.workers.env.gpus=1"])
    out = tmp_path / "kfp" / "dataset"
    with pytest.raises(RuntimeError, match=r"rayjob kubeflow/harnessrl-data-\w+ failed: jobStatus FAILED"):
        work(cfg.data, "", "", str(tmp_path / "dvc-remote"), StoreConfig(), out, data_rayjob(cfg))
    assert "the RayJob is its head alone" in capsys.readouterr().out
    (body,) = api.objects.values()
    assert body["spec"]["rayClusterSpec"]["workerGroupSpecs"] == []
    assert list(out.parent.iterdir()) == [] and not (tmp_path / "dvc-remote").exists()  # nothing built, pushed
