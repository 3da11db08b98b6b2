"""The create-and-wait logic every job stage shares (harnessrl/cluster/kube.py), against a scripted fake
of the Kubernetes custom-objects API: an object left by a killed try is replaced, transient API errors
are retried, and any other way out deletes the job so that no GPUs stay held."""

from __future__ import annotations

import pytest

from harnessrl.cluster import kube
from harnessrl.cluster.trainjob import verdict

REF = ("trainer.kubeflow.org", "v1alpha1", "kubeflow", "trainjobs", "harnessrl-cpt-0")
DONE = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class Scripted:
    """A recorded stub of create/get/delete: `creates` and `gets` are what each call returns or raises."""

    def __init__(self, creates: list, gets: list) -> None:
        self.creates, self.gets, self.calls = creates, gets, []

    def _next(self, queue: list, call: str):
        self.calls.append(call)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def create_namespaced_custom_object(self, *args):
        return self._next(self.creates, "create")

    def get_namespaced_custom_object(self, *args):
        return self._next(self.gets, "get")

    def delete_namespaced_custom_object(self, *args):
        self.calls.append("delete")


def test_a_job_left_by_a_killed_try_is_replaced_and_transient_errors_are_retried() -> None:
    api = Scripted(creates=[ApiError(409), {}], gets=[ApiError(503), ApiError(429), {"status": {}}, DONE])
    kube.run_job(api, REF, {}, verdict, deadline_s=0, poll_s=0.01, say=lambda _: None)
    assert api.calls == ["create", "delete", "create", "get", "get", "get", "get"]


def test_an_api_error_that_is_not_transient_deletes_the_job_and_is_raised() -> None:
    api = Scripted(creates=[{}], gets=[{"status": {}}, ApiError(403)])
    with pytest.raises(ApiError, match="403"):
        kube.run_job(api, REF, {}, verdict, deadline_s=0, poll_s=0.01, say=lambda _: None)
    assert api.calls == ["create", "get", "get", "delete"]


def test_the_job_is_owned_by_the_stage_pod_in_its_namespace(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    class Core:  # a recorded stub of CoreV1Api.read_namespaced_pod
        def read_namespaced_pod(self, name: str, namespace: str):
            return SimpleNamespace(metadata=SimpleNamespace(name=name, uid=f"uid-of-{name}"))

    monkeypatch.setenv("HOSTNAME", "harnessrl-run-cpt-pod")
    (tmp_path / "namespace").write_text("kubeflow\n")
    owner = kube.pod_owner("kubeflow", Core(), sa_dir=tmp_path)
    assert owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "harnessrl-run-cpt-pod",
        "uid": "uid-of-harnessrl-run-cpt-pod",
    }
    assert kube.pod_owner("other-namespace", Core(), sa_dir=tmp_path) is None  # no owners across namespaces
    assert kube.pod_owner("kubeflow", Core(), sa_dir=tmp_path / "absent") is None  # not in a pod

    created = []
    api = Scripted(creates=[{}], gets=[DONE])
    api.create_namespaced_custom_object = lambda *args: created.append(args[-1]) or {}
    kube.run_job(api, REF, {"metadata": {"name": REF[-1]}}, verdict, 0, 0.01, lambda _: None, owner=owner)
    assert created[0]["metadata"] == {"name": REF[-1], "ownerReferences": [owner]}
