"""exgrpo.records.io's durable writes: files get their final mode when created, directories are published whole (the old copy
goes only after the new one is in place), manifests catch a changed, truncated or missing file."""

from __future__ import annotations

import os
import stat

import pytest

from exgrpo.records import io


def test_atomic_files_have_their_final_mode_before_anything_is_written(tmp_path):
    seen = {}
    old = os.umask(0o022)
    try:
        with io.atomic_path(tmp_path / "out.txt") as tmp:
            seen["mode"] = stat.S_IMODE(os.stat(tmp).st_mode)  # mkstemp alone would give 0600 here
            tmp.write_text("x")
    finally:
        os.umask(old)
    assert seen["mode"] == 0o644 and stat.S_IMODE(os.stat(tmp_path / "out.txt").st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "a.json").write_text("old")
    with pytest.raises(RuntimeError), io.atomic_open(tmp_path / "a.json") as fh:
        fh.write("half")
        raise RuntimeError("killed")
    assert (tmp_path / "a.json").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_publish_dir_replaces_a_directory_whole(tmp_path):
    final = tmp_path / "ckpt" / "step_2"
    final.mkdir(parents=True)
    (final / "old.bin").write_bytes(b"old")
    staged = tmp_path / "staging" / "step_2"
    (staged / "sub").mkdir(parents=True)
    (staged / "sub" / "new.bin").write_bytes(b"new")
    io.publish_dir(staged, final)
    assert sorted(p.relative_to(final).as_posix() for p in final.rglob("*")) == ["sub", "sub/new.bin"]
    assert not staged.exists() and sorted(p.name for p in final.parent.iterdir()) == ["step_2"]


def test_manifest_round_trip_and_each_kind_of_damage(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.bin").write_bytes(b"abc")
    (tmp_path / "d" / "sub" / "b.json").write_text("{}")
    io.write_manifest(tmp_path / "d")
    assert io.check_manifest(tmp_path / "d") is None
    (tmp_path / "d" / "a.bin").write_bytes(b"abd")  # same size, other bytes
    assert io.check_manifest(tmp_path / "d") == "a.bin: sha256 differs from the manifest"
    (tmp_path / "d" / "a.bin").write_bytes(b"ab")
    assert io.check_manifest(tmp_path / "d") == "a.bin: 2 bytes, the manifest says 3"
    (tmp_path / "d" / "a.bin").unlink()
    assert io.check_manifest(tmp_path / "d") == "a.bin: missing"
    (tmp_path / "d" / io.MANIFEST).write_text("{trunc")
    assert io.check_manifest(tmp_path / "d").startswith("no readable manifest")
