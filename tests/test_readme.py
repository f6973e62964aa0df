"""README.md is a contract: every call it shows runs or parses as written, every number in its
tables comes from a checked-in result file, every link resolves, and it stays under 12 KB."""

import json
import re
import runpy
import shlex
from pathlib import Path

import pytest
import typer.main
from load_script import load_script

import hetjax as hj
from hetjax.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_BYTES = 12 * 1024  # the issue: the front door, not a lab notebook
# the pages this change wrote; their links are checked too
DOCS = ("docs/history.md", "docs/cli.md", "docs/graphs.md", "docs/exact.md")


def _tables_module():
    return load_script("scripts/readme_tables.py")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def _command_lines(text: str, program: str) -> list[str]:
    """Lines of ```bash blocks and inline code spans that start with `program `."""
    lines = [ln for block in _blocks(text, "bash") for ln in block.splitlines()]
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return [s.strip() for s in lines + spans if s.strip().startswith(program + " ")]


def _spans_over_lines(text: str) -> list[str]:
    """Inline code spans, including those broken over a line (Markdown joins them)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]


def _parse_cli(line: str) -> None:
    """Parse a `hetjax ...` line against the real CLI without running it (raises on error)."""
    args = shlex.split(line, comments=True)[1:]
    root = typer.main.get_command(app)
    ctx = root.make_context("hetjax", list(args))
    sub = root.get_command(ctx, args[0])
    if sub is None:
        raise LookupError(f"hetjax: no command {args[0]!r}")
    if len(args) > 1:  # `hetjax place` alone names the command (prose), options would follow
        sub.make_context(args[0], args[1:], parent=ctx)


def test_readme_is_under_12_kb():
    assert README.stat().st_size < MAX_BYTES, f"README.md: {README.stat().st_size} bytes"


def test_python_blocks_run_as_written_and_print_what_the_readme_says(capsys):
    readme = README.read_text()
    blocks = _blocks(readme, "python")
    quickstart = (ROOT / "examples" / "quickstart.py").read_text()
    assert blocks and blocks[0].strip() == quickstart.strip()
    assert len(blocks[0].strip().splitlines()) <= 15  # the issue: 15 lines, imports included
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"))
    printed = capsys.readouterr().out
    shown = _blocks(readme, "text")[0]  # the output block after the quickstart
    assert printed.strip() == shown.strip()
    for block in blocks[1:]:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def test_every_hetjax_command_line_parses_against_the_cli():
    readme = README.read_text()
    lines = _command_lines(readme, "hetjax") + [
        s for s in _spans_over_lines(readme) if s.startswith("hetjax ")
    ]
    commands = {shlex.split(ln, comments=True)[1] for ln in lines}
    assert {"evaluate", "compare", "train", "place", "calibrate", "fidelity"} <= commands
    for line in lines:
        _parse_cli(line)
    # the check can fail: an unknown option or command is refused
    with pytest.raises(Exception, match="No such option"):
        _parse_cli("hetjax train --model bert-base --no-such-option 3")
    with pytest.raises(LookupError):
        _parse_cli("hetjax no-such-command")
    with pytest.raises(Exception, match="Missing parameter"):
        _parse_cli("hetjax place --platform edge")


def test_every_hetjax_command_line_in_the_docs_parses_against_the_cli():
    """docs/*.md: every `hetjax ...` line of a shell block and every inline `hetjax ...`."""
    checked, failed = 0, []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        lines = _command_lines(text, "hetjax") + [
            s for s in _spans_over_lines(text) if s.startswith("hetjax ")
        ]
        for line in lines:
            # a synopsis: optional parts in brackets, alternatives a|b (the first is parsed)
            line = re.sub(r"\[([^\[\]]*)\]", r"\1", line)
            line = re.sub(r"(\S+?)(\|\S+)+", r"\1", line)
            line = re.sub(r"(?<=\s)[NK](?=\s|$)", "1", line)  # a count placeholder
            if "--help" in line.split():  # `hetjax --help`, `hetjax COMMAND --help`: prose
                continue
            try:
                _parse_cli(line)
            except Exception as err:
                failed.append(f"{doc.name}: {line!r}: {err}")
        checked += len(lines)
    assert not failed, "\n".join(failed)
    assert checked >= 20, checked


def test_make_targets_and_scripts_named_in_the_readme_exist():
    readme = README.read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    makes = [ln.split()[1] for ln in _command_lines(readme, "make")]
    makes += [s.split()[1] for s in _spans_over_lines(readme) if re.match(r"make \w", s)]
    assert {"demo", "test"} <= set(makes)
    assert set(makes) <= targets
    scripts = [s.split()[1] for s in _spans_over_lines(readme) if s.startswith("python ")]
    assert scripts
    for path in scripts:
        assert (ROOT / path).is_file(), path


def test_hj_names_in_the_readme_exist():
    names = set(re.findall(r"\bhj((?:\.[A-Za-z_]\w*)+)", README.read_text()))
    assert names
    for name in names:
        obj = hj
        for part in name.strip(".").split("."):
            assert hasattr(obj, part), f"hj{name}"
            obj = getattr(obj, part)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("page", ["README.md", *DOCS])
def test_relative_links_resolve(page):
    path = ROOT / page
    links = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", path.read_text(), flags=re.S))
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        dest = (path.parent / target).resolve() if target else path
        assert dest.exists(), f"{page}: {link}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page}: {link}: no such heading"


def _readme_tables(text: str, marker: re.Pattern) -> tuple[dict[str, list[list[str]]], list]:
    """{marker name: rows of cells} and the unmarked tables (as lists of lines)."""
    lines, marked, unmarked, i = text.splitlines(), {}, [], 0
    while i < len(lines):
        m = marker.match(lines[i - 1]) if i else None
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            rows = [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines[i:j]]
            if m:
                assert m.group(1) not in marked, f"table {m.group(1)} twice"
                marked[m.group(1)] = rows
            else:
                unmarked.append(lines[i:j])
            i = j
        else:
            if m:
                marked[m.group(1)] = []  # a marker with no table under it
            i += 1
    return marked, unmarked


def _mismatches(readme_rows, expected_lines) -> list[str]:
    expected = [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in expected_lines]
    out = []
    if len(readme_rows) != len(expected):
        out.append(f"{len(readme_rows)} rows, the result files give {len(expected)}")
    for r, (got, want) in enumerate(zip(readme_rows, expected, strict=False)):
        if len(got) != len(want):
            out.append(f"row {r}: {len(got)} cells, expected {len(want)}")
        for c, (g, w) in enumerate(zip(got, want, strict=False)):
            if g != w:
                out.append(f"row {r} ({want[0]}), column {c} ({expected[0][c]}): {g!r} != {w!r}")
    return out


def test_every_table_number_comes_from_a_result_file():
    rt = _tables_module()
    text = README.read_text()
    marked, unmarked = _readme_tables(text, rt.MARKER)
    for name, rows in marked.items():
        assert not _mismatches(rows, rt.render(name)), (name, _mismatches(rows, rt.render(name)))
    for table in unmarked:  # tables no result file backs hold no numbers (float64 is a name)
        assert not any(re.search(r"(?<![A-Za-z_\d])\d", ln) for ln in table[2:]), table
    shown = list(marked)  # every table the script renders is shown, once, on one of its pages
    for page in rt.PAGES[1:]:
        on_page, _ = _readme_tables(page.read_text(), rt.MARKER)
        for name, rows in on_page.items():
            assert not _mismatches(rows, rt.render(name)), (page.name, name)
        shown += list(on_page)
    assert sorted(shown) == sorted(rt.TABLES)
    assert rt.main(["--check"]) == 0
    # the check can fail: one digit changed in a rendered cell is caught
    name = "exact"
    rows = [list(r) for r in marked[name]]
    rows[2][1] = rows[2][1][:-1] + str((int(rows[2][1][-1]) + 1) % 10)
    assert _mismatches(rows, rt.render(name))
    assert rt.rewrite(text) == text


def test_the_tables_are_rendered_from_the_files(tmp_path, monkeypatch):
    rt = _tables_module()
    # a changed result file changes the README's table
    exact = json.loads((rt.RESULTS / "exact.json").read_text())
    exact["presets"]["edge"]["score"] = 0.5
    (tmp_path / "exact.json").write_text(json.dumps(exact))
    monkeypatch.setattr(rt, "RESULTS", tmp_path)
    assert rt.render("exact") != _tables_module().render("exact")
    with pytest.raises(KeyError, match="table = 'nope'"):
        rt.render("nope")


def test_the_known_gaps_zero_shot_numbers_come_from_their_result_file():
    """The README's known-gaps line on zero-shot transfer quotes the bounded policy's means
    over unseen presets and unseen models (docs/results/zero_shot/rollout_bounded_zero_shot.json),
    rounded to one decimal; the rule it corrects is within 0.1 point of each."""
    doc = json.loads((ROOT / "docs/results/zero_shot/rollout_bounded_zero_shot.json").read_text())
    presets, models = doc["unseen_presets_mean_gap_pct"], doc["unseen_models_mean_gap_pct"]
    line = f"`--correction 0.3` {presets:.1f} / {models:.1f}% (targets 3 / 2%)"
    assert line in README.read_text().replace("\n  ", " ")
    assert doc["grid"]["n"] == 16 and len(doc["zero_shot"]) == 12
    for key, mean in (("seen_preset", presets), ("seen_model", models)):
        rule = [e["rollout_rule"]["mean_gap_pct"] for e in doc["zero_shot"] if not e[key]]
        assert abs(sum(rule) / len(rule) - mean) < 0.1
