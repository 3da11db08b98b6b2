"""Lineage and artifact-store throughput against the standard tools, side by side in one run:

1. `lineage verify` of a generated checkpoint (sharded weights, real manifest) against
   `sha256sum` over the same files: both read the same bytes from a warm page cache;
2. S3 upload and download of one large file through the store (multipart, retries configured,
   sha256 metadata on the way up and checked on the way down) against `aws s3 cp --endpoint-url`,
   both talking to the same moto server on loopback.

    PYTHONPATH=. python bench/lineage.py                 # 256 MiB checkpoint, 128 MiB S3 object
    PYTHONPATH=. python bench/lineage.py --gb            # 1 GiB of each (minutes on 2 cores)
    PYTHONPATH=. python bench/lineage.py --ckpt-mb 512 --s3-mb 64

The moto server runs in its own process; on a 2-core machine it competes with the client for
CPU, which caps both columns alike. Ratios are store / AWS CLI and verify / sha256sum time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harnessrl.config import StoreConfig
from harnessrl.lineage.manifest import write_manifest
from harnessrl.lineage.verify import verify
from harnessrl.store import open_store
from tests.s3_server import FAKE_CREDENTIALS, make_bucket, moto_server

MiB = 1 << 20
SHARD = 256 * MiB


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as f:
        left = size
        while left:
            n = min(left, 64 * MiB)
            f.write(os.urandom(n))
            left -= n


def make_checkpoint(root: Path, size: int) -> Path:
    """Weights sharded like an HF checkpoint, plus configs, with a real manifest."""
    root.mkdir(parents=True)
    shards = max(1, -(-size // SHARD))
    for i in range(shards):
        write_random(root / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", min(SHARD, size - i * SHARD))
    (root / "config.json").write_text(json.dumps({"hidden_size": 4096}))
    write_manifest(
        root, stage="sft", config={"seed": 0}, parent=None, data_md5=None, metrics={}, started=time.time(), seed=0
    )
    return root


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def best(fn, repeats: int) -> float:
    return min(timed(fn) for _ in range(repeats))


def bench_verify(tmp: Path, size: int, repeats: int) -> tuple[float, float]:
    ckpt = make_checkpoint(tmp / "ckpt", size)
    files = sorted(str(p) for p in ckpt.iterdir())
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for both

    def ours() -> None:
        checks = list(verify(ckpt))
        assert all(c.ok is not False for c in checks), checks

    theirs = lambda: subprocess.run(["sha256sum", *files], stdout=subprocess.DEVNULL, check=True)
    return best(ours, repeats), best(theirs, repeats)


def bench_s3(tmp: Path, size: int, repeats: int) -> dict[str, float]:
    os.environ.update(FAKE_CREDENTIALS)
    endpoint = moto_server()
    bucket = make_bucket(endpoint)
    src = tmp / "blob.bin"
    write_random(src, size)
    store = open_store(f"s3://{bucket}/bench", StoreConfig(endpoint_url=endpoint))
    aws = ["aws", "s3", "cp", "--endpoint-url", endpoint, "--only-show-errors"]
    out = {
        "store up": best(lambda: store.put_file(src, "store.bin"), repeats),
        "store down": best(lambda: store.get_file("store.bin", tmp / "store.out"), repeats),
        "aws up": best(lambda: subprocess.run([*aws, str(src), f"s3://{bucket}/bench/aws.bin"], check=True), repeats),
        "aws down": best(
            lambda: subprocess.run([*aws, f"s3://{bucket}/bench/aws.bin", str(tmp / "aws.out")], check=True), repeats
        ),
    }
    assert (tmp / "store.out").read_bytes() == (tmp / "aws.out").read_bytes() == src.read_bytes()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt-mb", type=int, default=256, help="checkpoint size for verify (default: %(default)s)")
    ap.add_argument("--s3-mb", type=int, default=128, help="object size for S3 (default: %(default)s)")
    ap.add_argument("--gb", action="store_true", help="1 GiB for both: the issue's size")
    ap.add_argument("--repeats", type=int, default=2, help="best of N (default: %(default)s)")
    args = ap.parse_args()
    ckpt_mb, s3_mb = (1024, 1024) if args.gb else (args.ckpt_mb, args.s3_mb)

    tmp = Path(tempfile.mkdtemp(prefix="harnessrl-bench-lineage-"))
    try:
        ours, theirs = bench_verify(tmp, ckpt_mb * MiB, args.repeats)
        print(f"\nverify, {ckpt_mb} MiB checkpoint (warm cache, best of {args.repeats})")
        print(f"  {'harnessrl lineage verify':<26} {ckpt_mb / ours:8.0f} MiB/s  {ours:6.2f} s")
        print(f"  {'sha256sum':<26} {ckpt_mb / theirs:8.0f} MiB/s  {theirs:6.2f} s")
        print(f"  ratio verify/sha256sum time: {ours / theirs:.2f}x")
        shutil.rmtree(tmp / "ckpt")

        s3 = bench_s3(tmp, s3_mb * MiB, args.repeats)
        print(f"\nS3 on loopback (moto server), {s3_mb} MiB object (best of {args.repeats})")
        print(f"  {'':<12} {'harnessrl store':>20} {'aws s3 cp':>20} {'store/aws time':>15}")
        for way in ("up", "down"):
            a, b = s3[f"store {way}"], s3[f"aws {way}"]
            print(f"  {way:<12} {s3_mb / a:12.0f} MiB/s {a:5.2f}s {s3_mb / b:12.0f} MiB/s {b:5.2f}s {a / b:14.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
