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
"""

import os
import shutil
import tempfile
from pathlib import Path

from kfp.dsl import Dataset, Output

from harnessrl.config import DataConfig, StoreConfig
from harnessrl.data.md5 import dvc_dir_md5


def work(cfg: DataConfig, md5: str, folder: str, remote: str, store: StoreConfig, out: Path) -> str:
    """Fill `out` with the data folder; returns its DVC md5."""
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
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        build(cfg, scratch / "data", progress=True, store=store, processes=os.cpu_count() or 1)
        md5 = dvc.push(scratch, scratch / "data", remote, store)["md5"]
        with atomic_dir(out) as tmp:
            tmp.rmdir()
            (scratch / "data").replace(tmp)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return md5


def data(config: str, md5: str, folder: str, remote: str, store: str, code_hash: str, dataset: Output[Dataset]) -> str:
    """KFP component: the data folder as an artifact. Returns its md5, which every stage records."""
    import json
    from pathlib import Path

    from components.data import work
    from harnessrl.config import DataConfig, StoreConfig

    cfg, store_cfg = DataConfig.model_validate(json.loads(config)), StoreConfig.model_validate(json.loads(store))
    md5 = work(cfg, md5, folder, remote, store_cfg, Path(dataset.path))
    print(f"[data] done: {md5}", flush=True)
    return md5
