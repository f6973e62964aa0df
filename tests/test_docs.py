"""Every ```python block in docs/*.md runs as written (issue #19), in a scratch directory that
holds what the text says the reader already has (calibration.md: a `platform.json` from
`hetjax calibrate`; a saved preset stands in for it)."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path

import pytest

import hetjax as hj

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [
    pytest.param(path, i, code, id=f"{path.name}:{i}")
    for path in sorted((ROOT / "docs").glob("*.md"))
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))
]


def test_docs_have_python_blocks():
    assert BLOCKS  # the glob and the pattern find them


@pytest.mark.parametrize(("path", "index", "code"), BLOCKS)
def test_docs_python_block_runs_as_written(path, index, code, tmp_path, monkeypatch, capsys):
    hj.hardware.save(hj.hardware.preset("edge"), tmp_path / "platform.json")
    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"{path.stem}_{index}.py"
    script.write_text(code)
    runpy.run_path(os.fspath(script), run_name="__main__")
    capsys.readouterr()
