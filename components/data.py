"""The DAG's first step, data: the recipe's data folder, handed to every stage as one KFP artifact.

No stage reads data from the image or from the checkout it was launched from: each reads this
step's output, which nothing changes once it is written. The DAG fills it one of three ways:

- `folder`: a folder built on this machine (local runs). It is copied in and checked against its md5,
  so rebuilding or deleting the checkout's folder mid-run cannot change what later stages read;
- `md5` and `remote`: the version that the data config's `.dvc` pointer names, pulled from the DVC
  remote (cluster runs);
- `remote` alone: no version of this data config was pushed yet. It is built from the config and
  pushed; its md5 goes to every stage's manifest. Compiles pull it once its pointer is committed
  (`harnessrl data pull` then `git add` the pointer, or `data build --push` from a checkout).
  With `rayjob` (the recipe's infra has `rayjob`), the build runs as a RayJob (harnessrl/cluster/
  rayjob.py) whose driver, `build_on_ray`, builds the folder on the shared PVC and mines the
  sources as Ray tasks on the head and the CPU-only worker groups; this step waits for it as the RL
  stages do, then pushes the folder and hands it on as above.
"""

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from kfp.dsl import Dataset, Output

from harnessrl.config import DataConfig, RayJobSlice, StoreConfig
from harnessrl.data.md5 import dvc_dir_md5

if TYPE_CHECKING:
    from harnessrl.stage import StageContext


def work(
    cfg: DataConfig,
    md5: str,
    folder: str,
    remote: str,
    store: StoreConfig,
    out: Path,
    rayjob: RayJobSlice | None = None,
) -> str:
    """Fill `out` with the data folder; returns its DVC md5. `rayjob`: build it as a RayJob."""
    from harnessrl.data import remote as dvc
    from harnessrl.data.build import build
    from harnessrl.io import atomic_dir

    out.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        with atomic_dir(out) as tmp:
            shutil.copytree(folder, tmp, dirs_exist_ok=True)
            got = dvc_dir_md5(tmp)
            if md5 and got != md5:
                raise RuntimeError(f"data folder {folder} changed since the run started: md5 {got}, expected {md5}")
        return got
    if not remote:
        raise ValueError("the data step needs a built folder or a DVC remote (store.data_remote)")
    if md5:
        print(f"[data] pulling version {md5} from {remote}", flush=True)
        dvc.pull_version(md5, remote, store, out)
        return md5
    print(f"[data] no version of data config {cfg.name} was pushed: building it, then pushing to {remote}", flush=True)
    # The same on every try of the step (a killed try's is replaced): a RayJob's name comes from it.
    scratch = out.parent / f".{out.name}.build"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        if rayjob is None:
            build(cfg, scratch / "data", progress=True, store=store, processes=os.cpu_count() or 1)
        else:
            built = build_as_rayjob(cfg, store, rayjob, scratch)
        md5 = dvc.push(scratch, scratch / "data", remote, store)["md5"]
        if rayjob is not None and md5 != built:
            raise RuntimeError(f"the RayJob built data {built}, but the folder copied from its PVC is {md5}")
        with atomic_dir(out) as tmp:
            tmp.rmdir()
            (scratch / "data").replace(tmp)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return md5


def build_as_rayjob(cfg: DataConfig, store: StoreConfig, cluster: RayJobSlice, scratch: Path) -> str:
    """Build the data folder in a RayJob (`build_on_ray` on its head) and copy it from the shared PVC
    into `scratch/data`; returns the md5 its driver reported."""
    from harnessrl.cluster import rayjob
    from harnessrl.stage import StageContext

    if not cluster.rayjob.workers:
        print("[data] infra.rayjob has no worker group without GPUs: the RayJob is its head alone, "
              "where every source's Ray task runs", flush=True)  # fmt: skip
    ctx = StageContext(
        cfg={"seed": cfg.seed, "data": cfg.model_dump(), "store": store.model_dump(), "rayjob": cluster.model_dump()},
        parent=None,
        out=scratch,
        data_dir=None,  # nothing to copy in: the job builds it
    )
    return rayjob.run("data", ctx)["md5"]


def build_on_ray(ctx: "StageContext") -> dict:
    """The data RayJob's driver (harnessrl/cluster/rayjob.py, TARGETS["data"]): the data folder built
    into the job's `out/data` on the shared PVC, its sources mined as Ray tasks on the RayJob's Ray
    cluster (RAY_ADDRESS), every node of which mounts the PVC."""
    from harnessrl.data.build import build

    cfg, store = DataConfig.model_validate(ctx.cfg["data"]), StoreConfig.model_validate(ctx.cfg["store"])
    return {"md5": dvc_dir_md5(build(cfg, ctx.out / "data", progress=True, store=store, use_ray=True))}


def data(
    config: str, md5: str, folder: str, remote: str, store: str, code_hash: str, rayjob: str, dataset: Output[Dataset]
) -> str:
    """KFP component: the data folder as an artifact. Returns its md5, which every stage records.
    `rayjob`: the RayJobSlice as JSON where the build runs as a RayJob, else ""."""
    import json
    from pathlib import Path

    from components.data import work
    from harnessrl.config import DataConfig, RayJobSlice, StoreConfig

    cfg, store_cfg = DataConfig.model_validate(json.loads(config)), StoreConfig.model_validate(json.loads(store))
    cluster = RayJobSlice.model_validate(json.loads(rayjob)) if rayjob else None
    md5 = work(cfg, md5, folder, remote, store_cfg, Path(dataset.path), cluster)
    print(f"[data] done: {md5}", flush=True)
    return md5
