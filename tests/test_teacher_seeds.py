"""scripts/teacher_seeds.py: the teacher ablation over seeds, recomputed from the checked-in
reports, equals docs/results/teacher_seeds.json and the table in docs/agent.md."""

import json
from pathlib import Path

import numpy as np
from load_script import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_teacher_seeds_match_the_reports_and_the_docs(tmp_path, capsys):
    script = load_script("scripts/teacher_seeds.py")
    rows = script.main(
        ["--results", str(ROOT / "docs/results"), "--json", str(tmp_path / "t.json")]
    )
    kept = json.loads((ROOT / "docs/results/teacher_seeds.json").read_text())
    assert json.loads((tmp_path / "t.json").read_text()) == kept
    assert set(rows) == {"none", "least_loaded", "greedy_eft", "cem", "exact"}
    for r in rows.values():
        assert len(r["seeds"]) == 3 and len(set(r["seeds"])) == 3  # three different seeds
        g = np.asarray(r["greedy"]["per_seed"])
        assert r["greedy"]["mean"] == np.mean(g) and r["greedy"]["std"] == np.std(g, ddof=1)
        assert r["simulations"] == [1, 17]
    table = capsys.readouterr().out.strip()
    doc = (ROOT / "docs/agent.md").read_text()
    assert "<!-- teacher_seeds -->\n" + table + "\n<!-- /teacher_seeds -->" in doc
