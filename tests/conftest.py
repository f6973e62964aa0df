"""Shared pytest setup: `--slow` opts in to the full matrix; warnings raised by hetjax fail."""

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_configure(config):
    # A warning issued from any hetjax module is a bug (STYLE: strict tests).
    config.addinivalue_line("filterwarnings", r"error::Warning:hetjax(\..*)?")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
