"""Shared pytest setup: `--slow` opts in to the full matrix; warnings raised by hetjax fail.

One JAX persistent compilation cache per test session, shared by the xdist workers: several
tests build the same training loop (a Trainer per run, resumed runs), and compiling it is most
of their time. The cache lives in a temporary folder made by the controlling process and is
removed at the end, so every session compiles from scratch at least once.

The tests' workloads are tiny and their time goes to compiling, so XLA's CPU backend runs
with LLVM optimisation level 0 (set before JAX starts a backend; subprocesses inherit it).
The same suite passes at the default level; this only trades run time for compile time.
"""

import os
import shutil
import tempfile

# Not `--xla_cpu_use_fusion_emitters=false`: it halves compile time, but two programs that
# compute the same numbers (the clone in make_train and alone; the exact search's two paths)
# then round differently in the last bit, so the suite's bit-identity checks fail.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    _flags = os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    os.environ["XLA_FLAGS"] = _flags.strip()

import pytest  # noqa: E402  (after XLA_FLAGS)

# also where the `hetjax` commands the tests start cache (never the user's ~/.cache)
from hetjax.compilation_cache import ENV_VAR as _CACHE_ENV  # noqa: E402
from hetjax.compilation_cache import enable_compilation_cache  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_configure(config):
    # A warning issued from any hetjax module is a bug (STYLE: strict tests).
    config.addinivalue_line("filterwarnings", r"error::Warning:hetjax(\..*)?")
    if not hasattr(config, "workerinput"):  # the controlling process (or a run without xdist)
        # workers are started after this and inherit the environment
        os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="hetjax-jax-cache-")
        config._hetjax_cache_owner = True
    enable_compilation_cache(os.environ[_CACHE_ENV], min_compile_s=0.5)


def pytest_unconfigure(config):
    if getattr(config, "_hetjax_cache_owner", False):
        shutil.rmtree(os.environ.pop(_CACHE_ENV), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
