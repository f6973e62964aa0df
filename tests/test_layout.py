"""The layout promises of docs/layout.md, checked on the source: the library imports without
the CLI framework, and no package reaches into another package's private modules."""

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "hetjax"


def _imports(path: Path):
    """(line, imported module) of every import statement of one source file (private
    functions imported from another module are names, not modules: not listed)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for a in node.names:  # `from hetjax.exact import _chain`: a module, not a name
                sub = PKG.parent.joinpath(*f"{node.module}.{a.name}".split("."))
                if sub.with_suffix(".py").is_file() or sub.is_dir():
                    yield node.lineno, f"{node.module}.{a.name}"


def _package(path: Path) -> str:
    """The hetjax package a source file belongs to ("hetjax" for top-level modules)."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts[:-1])


def test_only_the_cli_imports_typer():
    bad = [f"{p.relative_to(PKG.parent)}:{line}" for p in PKG.rglob("*.py")
           if "cli" not in p.relative_to(PKG).parts
           for line, mod in _imports(p) if mod.split(".")[0] == "typer"]  # fmt: skip
    assert not bad, bad


def test_no_package_imports_another_packages_private_modules():
    bad = []
    for path in PKG.rglob("*.py"):
        own = _package(path)
        for line, mod in _imports(path):
            parts = mod.split(".")
            private = [i for i, part in enumerate(parts) if part.startswith("_")
                       and not part.startswith("__")]  # fmt: skip
            if parts[0] != "hetjax" or not private:
                continue
            owner = ".".join(parts[: private[0]])  # the package holding the private module
            if own != owner and not own.startswith(owner + "."):
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {mod}")
    assert not bad, bad


def test_the_check_sees_a_violation(tmp_path, monkeypatch):
    fake = tmp_path / "hetjax" / "agents"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text("from hetjax.exact._chain import solve\nimport typer\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "hetjax")
    for test in (test_only_the_cli_imports_typer,
                 test_no_package_imports_another_packages_private_modules):  # fmt: skip
        try:
            test()
        except AssertionError:
            continue
        raise AssertionError(f"{test.__name__} missed the violation")


def test_the_library_imports_without_typer():
    code = (
        "import sys; sys.modules['typer'] = None; import hetjax, hetjax.agents, "
        "hetjax.sweep, hetjax.onnx, hetjax.env, hetjax.exact, hetjax.compare; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
