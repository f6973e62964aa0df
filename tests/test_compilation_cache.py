"""The persistent compilation cache the CLI turns on: where it lives, how it is switched off."""

import os
import subprocess
import sys

import jax
import pytest

import hetjax as hj
from hetjax import compilation_cache as cc


@pytest.fixture
def no_jax_cache():
    """Run a test as if JAX had no cache folder configured (conftest configures one)."""
    saved = (jax.config.jax_compilation_cache_dir,
             jax.config.jax_persistent_cache_min_compile_time_secs,
             jax.config.jax_compilation_cache_max_size)  # fmt: skip
    jax.config.update("jax_compilation_cache_dir", None)
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])
    jax.config.update("jax_compilation_cache_max_size", saved[2])


def test_default_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cc.default_cache_dir() == tmp_path / "hetjax" / "xla"
    for off in ("off", "0", "", "None"):
        monkeypatch.setenv(cc.ENV_VAR, off)
        assert cc.default_cache_dir() is None
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "mine"))
    assert cc.default_cache_dir() == tmp_path / "mine"


def test_enable_sets_jax_and_a_configured_folder_wins(no_jax_cache, tmp_path):
    folder = hj.enable_compilation_cache(tmp_path / "c", min_compile_s=0.5, max_bytes=2**20)
    assert folder == tmp_path / "c" and folder.is_dir()
    assert jax.config.jax_compilation_cache_dir == str(folder)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.5
    assert jax.config.jax_compilation_cache_max_size == 2**20
    # already configured (by the user, or just now): left as it is
    assert hj.enable_compilation_cache(tmp_path / "other") == folder
    assert not (tmp_path / "other").exists()


def test_entries_written_without_a_cap_are_repaired(no_jax_cache, tmp_path):
    """A folder with an entry JAX wrote uncapped (no access-time file) breaks every write of the
    capped cache; enabling the cache there first gives such entries an access time."""
    from jax._src.lru_cache import LRUCache

    folder = tmp_path / "c"
    LRUCache(str(folder), max_size=-1).put("old", b"x" * 100)
    capped = LRUCache(str(folder), max_size=1000)
    with pytest.raises(FileNotFoundError):
        capped.put("new", b"y" * 100)
    hj.enable_compilation_cache(folder, max_bytes=1000)
    capped.put("new", b"y" * 100)
    assert capped.get("new") == b"y" * 100 and capped.get("old") == b"x" * 100


def test_off_and_bad_folders(no_jax_cache, monkeypatch, tmp_path):
    monkeypatch.setenv(cc.ENV_VAR, "off")
    assert hj.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(hj.HetjaxError, match="compilation cache folder"):
        hj.enable_compilation_cache(blocker / "cache")
    monkeypatch.setenv(cc.ENV_VAR, str(blocker / "cache"))  # asked for by name: an error
    with pytest.raises(hj.HetjaxError, match="compilation cache folder"):
        hj.enable_compilation_cache()
    monkeypatch.delenv(cc.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the default: quietly no cache
    assert hj.enable_compilation_cache() is None
    with pytest.raises(hj.HetjaxError, match="min_compile_s"):
        hj.enable_compilation_cache(tmp_path, min_compile_s=-1)
    with pytest.raises(hj.HetjaxError, match="max_bytes"):
        hj.enable_compilation_cache(tmp_path, max_bytes=0)


def test_the_cli_fills_the_cache_and_off_leaves_it_alone(tmp_path):
    def evaluate(value):
        env = {**os.environ, cc.ENV_VAR: value, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        r = subprocess.run(
            [sys.executable, "-c", "from hetjax.cli import main; main()", "evaluate",
             "--model", "bert-tiny", "--json"],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr

    evaluate(str(tmp_path / "on"))
    assert any((tmp_path / "on").iterdir())  # at least one compiled program stored
    evaluate("off")  # not even the default folder
    assert not (tmp_path / "xdg").exists()
