"""Recompute every hash along a checkpoint's chain and stop at the first one that does not match.

Per checkpoint, newest first: the manifest's seal (an edited manifest), the config hash, the
weights' tree digest against the id, each dataset's DVC md5 where its folder is on this machine,
then the parent: present, and carrying the id and seal this manifest recorded. The parent's own weights are
re-hashed when the walk reaches it, so a changed ancestor is named as itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harnessrl.config import config_hash
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.io import tree_digest
from harnessrl.lineage.manifest import MANIFEST, datasets, manifest_hash, parent_path


@dataclass(frozen=True)
class Check:
    ckpt: Path
    stage: str
    what: str  # manifest | config | weights | data:<name> | parent
    ok: bool | None  # None: could not be checked here (e.g. the data folder is elsewhere)
    detail: str


def verify(ckpt: Path) -> Iterator[Check]:
    """Yield checks in order; the first with ok=False ends the walk."""
    cur: Path | None = Path(ckpt)
    while cur is not None:
        checks = list(_one(cur))
        yield from checks
        if any(c.ok is False for c in checks):
            return
        m = json.loads((cur / MANIFEST).read_text())
        cur = parent_path(cur, m) if m.get("parent") else None


def _one(ckpt: Path) -> Iterator[Check]:
    try:
        m = json.loads((ckpt / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as e:
        yield Check(ckpt, "?", "manifest", False, f"unreadable {MANIFEST}: {e}")
        return
    stage = m.get("stage", "?")
    say = lambda what, ok, detail: Check(ckpt, stage, what, ok, detail)

    if "manifest_hash" not in m:
        yield say("manifest", False, "no manifest_hash: written before sealing, so edits cannot be ruled out")
        return
    got = manifest_hash(m)
    if got != m["manifest_hash"]:
        yield say("manifest", False, f"edited: seal {m['manifest_hash'][:12]}, content hashes to {got[:12]}")
        return
    yield say("manifest", True, f"seal {got[:12]}")

    got = config_hash(m["config"])
    yield say("config", got == m["config_hash"], f"config_hash {m['config_hash'][:12]}, recomputed {got[:12]}")

    got = tree_digest(ckpt, exclude=(MANIFEST, "metrics.jsonl"))
    if got != m["id"]:
        yield say("weights", False, f"changed: id {m['id'][:12]}, files now hash to {got[:12]}")
        return
    yield say("weights", True, f"id {got[:12]}")

    for name, d in datasets(m).items():
        path = Path(d["path"]) if d.get("path") else None
        if path is None or not path.is_dir():
            yield say(f"data:{name}", None, f"md5 {d['md5']}; folder not here ({d.get('path') or 'no path recorded'})")
            continue
        got = dvc_dir_md5(path)
        detail = f"md5 {d['md5']}" if got == d["md5"] else f"changed: recorded {d['md5']}, {path} now {got}"
        yield say(f"data:{name}", got == d["md5"], detail)

    if m.get("parent"):
        want = m["parent"]
        parent = parent_path(ckpt, m)
        if parent is None:
            yield say("parent", False, f"missing: {want['id'][:12]} (recorded at {want['path']})")
            return
        try:
            found = json.loads((parent / MANIFEST).read_text())
        except (OSError, json.JSONDecodeError) as e:
            found = {"id": f"<unreadable: {e}>"}
        # Same weights id and, where recorded (schema 2), the same sealed manifest.
        ok = found.get("id") == want["id"] and want.get("manifest_hash") in (None, found.get("manifest_hash"))
        detail = f"{want['id'][:12]} at {parent}"
        if not ok:
            seal = (found.get("manifest_hash") or "?")[:12]
            detail = f"replaced: recorded {want['id'][:12]}, {parent} is {found.get('id', '?')[:12]} (seal {seal})"
        yield say("parent", ok, detail)


def report(checks: Iterator[Check], say=print) -> str | None:
    """Print each check as one line; return the first failure as one line, or None if all passed."""
    n = skipped = 0
    for c in checks:
        n += 1
        skipped += c.ok is None
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[c.ok]
        say(f"{mark}  {c.stage:<12} {c.what:<10} {c.detail}")
        if c.ok is False:
            return f"{c.stage} at {c.ckpt}: {c.what} {c.detail}"
    say(f"verified: {n - skipped} checks passed, {skipped} skipped")
    return None
