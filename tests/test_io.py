"""Result files: atomic, strict JSON, and readable by others as any new file would be."""

from __future__ import annotations

import os

import pytest

import hetjax as hj
from hetjax.io import atomic_write_bytes, default_file_mode, read_json, write_json


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_results_get_the_mode_of_a_new_file_under_the_umask(tmp_path, umask):
    assert default_file_mode() == 0o666 & ~umask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open() gives a new file
    assert _mode(write_json(tmp_path / "a.json", {"x": float("inf")})) == _mode(plain)
    assert _mode(atomic_write_bytes(tmp_path / "b.bin", b"1")) == _mode(plain)
    assert read_json(tmp_path / "a.json") == {"x": float("inf")}
    # rewriting keeps it so, and leaves no temporary file behind
    write_json(tmp_path / "a.json", {"x": 1})
    assert _mode(tmp_path / "a.json") == _mode(plain)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.bin", "plain.txt"]


def test_exported_onnx_models_get_the_same_mode(tmp_path, umask):
    out = hj.onnx.export_transformer("bert-tiny", tmp_path / "m.onnx")
    assert _mode(out) == 0o666 & ~umask
