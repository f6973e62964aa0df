"""The README's Python example runs as written (and matches examples/quickstart.py)."""

import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_is_the_quickstart_and_runs(capsys):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    quickstart = (ROOT / "examples" / "quickstart.py").read_text()
    assert block.strip() == quickstart.strip()
    assert len(block.strip().splitlines()) <= 15  # the issue: at most 15 lines, imports included
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"))
    out = capsys.readouterr().out
    assert "latency" in out and "best of 4096 random plans" in out
