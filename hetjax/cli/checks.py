"""Validation of command-line options before a command does any work.

Every command first turns its options into checked values with these helpers (an `OptionError`
naming the option and the value on a bad one), and only then computes or writes anything. Paths
to write are checked without creating them: a bad `--out` fails before minutes of work.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from pathlib import Path

from hetjax.errors import CheckpointError, HetjaxError, PlatformError

__all__ = [
    "OptionError",
    "naming",
    "at_least",
    "in_range",
    "one_of",
    "parse_dims",
    "quality_options",
    "model_graph",
    "platform",
    "writable_dir",
    "writable_file",
    "run_dir",
]


class OptionError(HetjaxError, ValueError):
    """A command-line option has a bad value (names the option and the value)."""


@contextlib.contextmanager
def naming(option: str, value):
    """Errors raised inside name the option and its value first (same error type; an OSError
    from a path the system refuses becomes an `OptionError`)."""
    try:
        yield
    except OSError as err:
        raise OptionError(f"{option} {str(value)!r}: {err.strerror or err}") from None
    except HetjaxError as err:
        msg = str(err)
        if msg.startswith(option):
            raise
        # drop the library's own "<value>: " / "placement '<value>': " lead
        v = re.escape(str(value))
        msg = re.sub(rf"^(\w+ )?('{v}'|{v}): ", "", msg)
        raise type(err)(f"{option} {str(value)!r}: {msg}") from None


def at_least(option: str, value, low, *, what: str = "") -> None:
    """`value` >= `low` (and finite, for floats)."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"{option} {value}: must be a finite number")
    if value < low:
        raise OptionError(f"{option} {value}: must be >= {low}{what}")


def in_range(option: str, value, low, high, *, high_open: bool = False) -> None:
    """low <= value <= high (< high with `high_open`), finite."""
    if value is None:
        return
    if not math.isfinite(value) or value < low or (value >= high if high_open else value > high):
        bracket = ")" if high_open else "]"
        raise OptionError(f"{option} {value}: must be in [{low}, {high}{bracket}")


def one_of(option: str, value, choices) -> None:
    if value is not None and value not in choices:
        raise OptionError(f"{option} {value!r}: use one of {', '.join(map(str, choices))}")


def quality_options(formats: bool, compression: bool, quality_budget, delta) -> None:
    """Cost model 2.0's options: `--quality-budget` and `--delta` finite and >= 0, and only
    with `--formats` or `--compression`."""
    at_least("--quality-budget", quality_budget, 0.0)
    at_least("--delta", delta, 0.0)
    if (quality_budget is not None or delta is not None) and not (formats or compression):
        opt = "--quality-budget" if quality_budget is not None else "--delta"
        raise OptionError(
            f"{opt} {quality_budget if quality_budget is not None else delta}: "
            "needs --formats or --compression (FP16 plans lose no quality)"
        )


def parse_dims(option: str, items: list[str] | None, example: str = "sequence=128"
               ) -> dict[str, int]:  # fmt: skip
    """`--dim NAME=VALUE` entries (or another option's) as a dict of positive integers."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise OptionError(f"{option} {item!r}: use NAME=VALUE, e.g. {option} {example}")
        try:
            out[name] = int(value)
        except ValueError:
            raise OptionError(f"{option} {item!r}: the value must be an integer") from None
        if out[name] < 1:
            raise OptionError(f"{option} {item!r}: the value must be >= 1")
    return out


def model_graph(model: str, seq_len: int | None = None, granularity: str = "block", *,
                dims=None, blocks=None, option: str = "--model"):  # fmt: skip
    """The `LayerGraph` of `--model` (a built-in name or an ONNX file)."""
    import hetjax as hj

    at_least("--seq-len", seq_len, 1)
    one_of("--granularity", granularity, ("block", "op"))
    with naming(option, model):
        # a built-in name means the model even beside a folder of that name ("./NAME": the path)
        if model not in hj.graphs.MODELS and Path(model).is_dir():
            raise OptionError("is a directory, not a model name or ONNX file")
        return hj.graphs.load(model, seq_len, granularity, dims=dims or None, blocks=blocks)


def platform(name_or_path: str, option: str = "--platform"):
    """(Platform, device names) of a preset name or a platform JSON file, fully validated."""
    with naming(option, name_or_path):
        return _platform(name_or_path, option)


def _platform(name_or_path: str, option: str):
    import hetjax as hj

    if name_or_path in hj.hardware.PRESETS:
        return hj.hardware.preset(name_or_path), hj.hardware.PRESETS[name_or_path].device_names
    path = Path(name_or_path)
    if path.is_dir():
        raise OptionError(f"{option} {name_or_path!r}: is a directory, not a platform JSON file")
    if not path.exists():
        raise OptionError(
            f"{option} {name_or_path!r}: not a preset ({', '.join(hj.hardware.PRESETS)}) "
            "and no such file"
        )
    with naming(option, name_or_path):
        try:
            plat = hj.hardware.validate(hj.hardware.load(path))
            meta = hj.hardware.load_meta(path)
        except HetjaxError:
            raise
        except (ValueError, TypeError, KeyError, OSError, AttributeError) as err:
            raise PlatformError(
                f"not a valid platform file ({type(err).__name__}: {err})"
            ) from None
    names = meta.get("device_names") if isinstance(meta, dict) else None
    return plat, names if isinstance(names, list) else None


def _first_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def writable_dir(option: str, path: str | os.PathLike | None) -> None:
    """`path` is, or can be created as, a writable directory (nothing is created here)."""
    if path is None:
        return
    with naming(option, path):
        _writable_dir(option, path)


def _writable_dir(option: str, path: str | os.PathLike) -> None:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OptionError(f"{option} {str(path)!r}: exists and is not a directory")
    base = _first_existing(p)
    if not base.is_dir():
        raise OptionError(f"{option} {str(path)!r}: {str(base)!r} is a file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise OptionError(f"{option} {str(path)!r}: {str(base)!r} is not writable")


def writable_file(option: str, path: str | os.PathLike | None) -> None:
    """`path` is a file that can be written (its folder exists or can be made; not a folder)."""
    if path is None:
        return
    with naming(option, path):
        p = Path(path)
        if p.is_dir():
            raise OptionError("is a directory, not a file")
        if p.exists() and not os.access(p, os.W_OK):
            raise OptionError("is not writable")
        base = _first_existing(p.parent)
        if not base.is_dir():
            raise OptionError(f"{str(base)!r} is a file, not a directory")
        if not os.access(base, os.W_OK | os.X_OK):
            raise OptionError(f"{str(base)!r} is not writable")


def run_dir(option: str, path: Path, *, must_exist: bool, named: bool = False) -> None:
    """A training run directory: its config.json parses and its array files are readable.

    With `must_exist` (place, or resume of a run that was started) the directory must hold a
    config.json; otherwise an existing directory is checked only where it holds run files.
    `--checkpoint` without `named` (place's `RUN`, not `RUN:CHECKPOINT`) needs the run's
    default checkpoint (best.msgpack or checkpoint.msgpack).
    (Whether `path` can be written is `writable_dir`'s check, which `train` runs first.)"""
    import numpy as np

    cfg = Path(path) / "config.json"
    if not cfg.exists():
        if must_exist:
            raise CheckpointError(f"{option} {str(path)!r}: no config.json (not a training run)")
        return
    try:
        doc = json.loads(cfg.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("ppo"), dict):
            raise ValueError("no 'ppo' section")
    except (ValueError, OSError) as err:
        raise CheckpointError(f"{option} {str(path)!r}: config.json is invalid ({err})") from None
    from hetjax.agents.ppo import PPOConfig

    try:
        PPOConfig.from_dict(doc["ppo"])
    except HetjaxError as err:
        raise CheckpointError(f"{option} {str(path)!r}: config.json: {err}") from None
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{option} {str(path)!r}: config.json is invalid ({err})") from None
    for f in sorted(Path(path).glob("*.npz")):
        try:
            with np.load(f) as z:
                for k in z.files:
                    z[k]
        except Exception as err:  # noqa: BLE001  (any unreadable archive is the same error)
            raise CheckpointError(
                f"{option} {str(path)!r}: {f.name} is corrupt ({type(err).__name__})"
            ) from None
    saved = [(Path(path) / f).exists() for f in ("checkpoint.msgpack", "best.msgpack")]
    if option == "--checkpoint" and not named and not any(saved):
        if (Path(path) / "imitation.msgpack").exists():  # stopped after cloning, before PPO's
            raise CheckpointError(
                f"{option} {str(path)!r}: holds only imitation.msgpack (the clone before PPO): "
                f"apply it with --checkpoint {str(path)}:imitation, or continue the run with "
                "train --resume"
            )
        raise CheckpointError(
            f"{option} {str(path)!r}: holds no checkpoint yet (the run was stopped before its "
            "first; continue it with train --resume)"
        )
    for f in sorted(Path(path).glob("*.msgpack")):
        from flax import serialization

        try:
            serialization.msgpack_restore(f.read_bytes())
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(
                f"{option} {str(path)!r}: {f.name} is corrupt ({type(err).__name__})"
            ) from None
