"""`lineage show`, `diff` and `push`, and every command on s3:// checkpoints through the store."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from harnessrl.cli import main
from harnessrl.lineage.manifest import read_manifest
from tests.s3_server import S3, s3  # noqa: F401
from tests.test_lineage_verify import make_chain, make_data


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_show_prints_the_chain_from_base_to_the_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    *_, rl = make_chain(tmp_path / "c", make_data(tmp_path / "d"))
    rc, out, _ = cli(capsys, "lineage", "show", str(rl))
    assert rc == 0
    lines = [line for line in out.splitlines() if not line.strip().startswith("/")]
    assert [line.split()[0 if i == 0 else 1] for i, line in enumerate(lines)] == ["base", "cpt", "rl"]
    assert lines[1].startswith("└─ cpt") and lines[2].startswith("   └─ rl")
    m = read_manifest(rl)
    assert m["id"][:12] in lines[2] and f"config {m['config_hash'][:8]}" in lines[2]
    assert "data=" + m["data_md5"][:12] in lines[2] and "policy_version=2" in lines[2] and "loss=0.3333" in lines[2]
    assert m["code"]["commit"][:10] in lines[2]


def test_diff_names_config_keys_data_and_parent(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = make_chain(tmp_path / "a", make_data(tmp_path / "d1"))
    d2 = make_data(tmp_path / "d2")
    (d2 / "prompts.jsonl").write_text('{"q": 2}\n')
    b = make_chain(tmp_path / "b", d2, lr=2e-3, salt=b"other weights")
    rc, out, _ = cli(capsys, "lineage", "diff", str(a[1]), str(b[1]))
    assert rc == 0
    assert "config  stage.lr: 0.002 → 0.004" in out
    assert f"data    data: {read_manifest(a[1])['data_md5']} → {read_manifest(b[1])['data_md5']}" in out
    assert f"parent  {read_manifest(a[0])['id']} → {read_manifest(b[0])['id']}" in out
    rc, out, _ = cli(capsys, "lineage", "diff", str(a[2]), str(a[2]))
    assert rc == 0 and out.strip() == "same origin: no differences"


def test_s3_checkpoints_push_show_verify_and_fail_on_a_corrupt_object(
    s3: S3,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    base, cpt, rl = make_chain(tmp_path / "c", make_data(tmp_path / "d"))
    dest = f"s3://{s3.bucket}/ckpts"
    ep = ["--endpoint-url", s3.endpoint]
    rc, out, err = cli(capsys, "lineage", *ep, "push", str(rl), dest)
    assert rc == 0, err
    assert out.count("uploaded") == 3
    rc, out, _ = cli(capsys, "lineage", *ep, "push", str(rl), dest)
    assert out.count("present") == 3, "named by content: nothing uploaded twice"
    rl_uri = f"{dest}/{read_manifest(rl)['manifest_hash']}"

    rc, out, err = cli(capsys, "lineage", *ep, "verify", rl_uri)
    assert rc == 0, err
    assert "verified: 14 checks passed" in out
    rc, out, _ = cli(capsys, "lineage", *ep, "show", rl_uri)
    fetched_base = out.splitlines()[1].strip()  # the path line under base: fetched by id
    assert rc == 0 and fetched_base.endswith(read_manifest(base)["manifest_hash"])

    # Flip the cpt weights in the bucket: the store's checksum catches it on the way down.
    key = f"ckpts/{read_manifest(cpt)['manifest_hash']}/model.safetensors"
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    meta = client.head_object(Bucket=s3.bucket, Key=key)["Metadata"]
    client.put_object(Bucket=s3.bucket, Key=key, Body=b"tampered", Metadata=meta)
    rc, _, err = cli(capsys, "lineage", *ep, "verify", rl_uri)
    assert rc == 1 and key in err and "sha256 mismatch" in err

    # Delete the base from the bucket: verify names the missing parent.
    client.delete_object(Bucket=s3.bucket, Key=f"ckpts/{read_manifest(base)['manifest_hash']}/.harnessrl-index.json")
    client.put_object(Bucket=s3.bucket, Key=key, Body=(cpt / "model.safetensors").read_bytes(), Metadata=meta)
    base.rename(tmp_path / "gone")  # and the recorded local path too
    rc, _, err = cli(capsys, "lineage", *ep, "verify", rl_uri)
    assert rc == 1 and "cpt at" in err and "parent missing" in err

    rc, out, err = cli(capsys, "lineage", *ep, "show", f"s3://{s3.bucket}/ckpts/nothing-here")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "nothing-here" in err


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, _, err = cli(capsys, "lineage", "show", str(tmp_path))
    assert rc == 2 and "not a harnessrl checkpoint" in err
    rc, _, err = cli(capsys, "lineage", "diff", str(tmp_path), str(tmp_path / "x"))
    assert rc == 2
    rc, _, err = cli(capsys, "lineage", "verify", "s3://just-a-bucket")
    assert rc == 2 and "expected s3://bucket/prefix/<checkpoint>" in err


def test_show_lists_the_sources_the_data_came_from(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from harnessrl.sources.copies import SourceInfo, write_sources

    data = make_data(tmp_path / "d")
    write_sources(data, [SourceInfo("email", "stdlib:email", "train", "tree:" + "ab" * 32, "PSF-2.0", 29, 377753),
                         SourceInfo("flask", "/repos/flask", "heldout", "c0ffee" * 6 + "abcd", None, 80, 9)])  # fmt: skip
    *_, rl = make_chain(tmp_path / "c", data)
    rc, out, _ = cli(capsys, "lineage", "show", str(rl))
    assert rc == 0
    assert "source email (train): stdlib:email at tree:abababababab, license PSF-2.0" in out
    assert "source flask (heldout): /repos/flask at c0ffeec0ffeec0ffe, license unknown" in out
    assert read_manifest(rl)["datasets"]["data"]["sources"][0]["name"] == "email"
