"""A sweep specification: SWEEP.toml parsed and checked into frozen dataclasses.

Every field is checked here, before any work starts; a bad one raises `hj.SpecError` with one
line naming the field (as `models[2].n_heads`) and the value. The TOML reference is in
docs/sweep.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import numbers
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hetjax.errors import HetjaxError, SpecError

__all__ = [
    "ModelSpec",
    "PlatformSource",
    "Override",
    "PolicySpec",
    "CoSearch",
    "SweepSpec",
    "GRID_FIELDS",
    "OVERRIDE_FIELDS",
    "METHODS",
    "load",
    "parse",
    "check",
    "HEATMAP_COLUMNS",
]

# TransformerConfig fields a model grid may sweep (and seq_len, tokens per sample)
GRID_FIELDS = ("n_layers", "d_model", "n_heads", "d_ff", "seq_len")
# Platform fields an override may set or scale (SI units: FLOP/s, bytes/s, s, bytes, W, J/byte)
OVERRIDE_FIELDS = (
    "peak", "mem_bw", "launch", "mem_capacity", "p_busy", "p_idle", "b_half", "weight_bw",
    "link_bw", "link_latency", "link_energy",
)  # fmt: skip
# Methods besides the baselines (hj.baselines.STRATEGIES); "baselines" means all of those
METHODS = ("baselines", "exact", "pareto", "policy")
# Configuration columns of the results table a heatmap can use as an axis (besides the
# overrides' columns): numbers, or the model / platform labels as categories
HEATMAP_COLUMNS = ("model", "platform", "platform_index", "sample_index", "seed", "batches",
                   "batch", "alpha", "beta", "gamma", "params", "flops", *GRID_FIELDS)  # fmt: skip
_TOP_KEYS = {"name", "seeds", "batches", "weights", "methods", "shard_size", "models",
             "platforms", "overrides", "policy", "cosearch", "figures"}  # fmt: skip


@dataclass(frozen=True)
class ModelSpec:
    """One model of the sweep: a built-in name, an ONNX file or one point of a grid."""

    label: str  # unique name in the results table
    source: str  # built-in name (or grid base) or ONNX path
    seq_len: int | None = None  # tokens per sample (None: the model's own)
    fields: tuple[tuple[str, int], ...] = ()  # grid values: (("n_layers", 6), ...)
    dims: tuple[tuple[str, int], ...] = ()  # ONNX symbolic dimensions
    blocks: str | None = None  # ONNX block regex
    onnx: bool = False

    def config(self):
        """The TransformerConfig of a built-in or grid model (None for ONNX)."""
        if self.onnx:
            return None
        from hetjax.graphs.transformers import config

        base = config(self.source)
        values = {k: v for k, v in self.fields if k != "seq_len"}
        if not values:
            return base
        if "d_ff" not in values and "d_model" in values:  # keep the base's d_ff / d_model ratio
            values["d_ff"] = base.d_ff * values["d_model"] // base.d_model
        return dataclasses.replace(base, name=self.label, published_params=None, **values)

    def graph(self, granularity: str = "block"):
        """The model's `LayerGraph` at `granularity` ("block", the sweep's; "op" for a policy
        trained at op granularity)."""
        import hetjax as hj

        if self.onnx:
            return hj.graphs.load(self.source, self.seq_len, granularity,
                                  dims=dict(self.dims) or None, blocks=self.blocks)  # fmt: skip
        return hj.graphs.transformer(self.config(), seq_len=self.seq_len, granularity=granularity)


@dataclass(frozen=True)
class PlatformSource:
    """Platforms of one `[[platforms]]` entry: a preset, a platform JSON file, or `n` platforms
    sampled around a preset (`hj.hardware.sample(key(seed), n, base, spread, links)`)."""

    label: str
    kind: str  # "preset" | "file" | "sample"
    name: str  # preset name, file path, or the sampled base preset
    n: int = 1
    spread: float = 2.0
    links: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Override:
    """A grid over one platform field: `set` replaces it (on every real device, or every
    directed pair of distinct real devices for link fields; only `device` if given),
    `scale` multiplies it."""

    field: str
    mode: str  # "set" | "scale"
    values: tuple[float, ...]
    device: int | None = None  # a device index (for link fields: the pairs it is part of)

    @property
    def column(self) -> str:
        at = "" if self.device is None else f"[{self.device}]"
        return f"{self.field}{at}" + ("_scale" if self.mode == "scale" else "")


@dataclass(frozen=True)
class PolicySpec:
    """A trained policy as a sweep method. `checkpoint` is a training run directory (`hetjax
    train --out`), `RUN:CHECKPOINT` for another checkpoint of it (`imitation`, `best`, `last`
    or a file NAME.msgpack's NAME), or a tuple of those: the ensemble of their policies
    (`hj.agents.load_ensemble`)."""

    checkpoint: str | tuple[str, ...]  # run directory, RUN:CHECKPOINT, or a tuple (ensemble)
    best_of: int = 0  # 0: greedy; K: the best of the greedy plan and K sampled ones

    @property
    def members(self) -> tuple[str, ...]:
        """The policy's members (one for a single run), each `RUN` or `RUN:CHECKPOINT`."""
        one = isinstance(self.checkpoint, (str, os.PathLike))
        return tuple(os.fspath(m) if isinstance(m, os.PathLike) else m
                     for m in ((self.checkpoint,) if one else self.checkpoint))  # fmt: skip

    @property
    def run(self) -> str:
        """The first member's run directory (the device slots and batches of all)."""
        from hetjax.agents.ensemble import parse_member

        return str(parse_member(self.members[0])[0])


@dataclass(frozen=True)
class CoSearch:
    """Architecture x placement co-search: per platform, the Pareto front over (capacity max,
    latency min, energy min, memory min) of the models at their exact optimal placements."""

    capacity: str = "params"  # "params" | "flops" | "quality"
    quality: str | None = None  # CSV with columns model,quality (capacity = "quality")
    latency_budget_ms: float | None = None  # rows flagged `fits_budget`


@dataclass(frozen=True)
class SweepSpec:
    name: str
    models: tuple[ModelSpec, ...]
    platforms: tuple[PlatformSource, ...]
    overrides: tuple[Override, ...] = ()
    weights: tuple[tuple[float, float, float], ...] = ((0.6, 0.3, 0.1),)
    batch_sets: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 4.0, 8.0, 16.0, 32.0),)
    seeds: tuple[int, ...] = (0,)
    methods: tuple[str, ...] = ("baselines", "exact")
    policy: PolicySpec | None = None
    shard_size: int = 256
    cosearch: CoSearch | None = None
    heatmap: tuple[str, str] | None = None

    def baselines(self) -> tuple[str, ...]:
        from hetjax.baselines import STRATEGIES

        if "baselines" in self.methods:
            return tuple(STRATEGIES)
        return tuple(m for m in self.methods if m in STRATEGIES)

    def fingerprint(self, shard_size: int | None = None) -> str:
        """Hash of everything the results depend on (the shard size names the shard files).

        Files enter by their contents, not their paths: an ONNX model, a platform JSON, a
        policy checkpoint or a quality CSV that changed is another sweep, and the same file
        named by another path (the TOML run from another folder) is the same sweep."""
        doc = self._fingerprint_doc(shard_size)
        for m in doc["models"]:
            if m["onnx"]:
                m["source"] = _digest(m["source"])
        for p in doc["platforms"]:
            if p["kind"] == "file":
                p["name"] = _digest(p["name"])
        if doc["policy"] is not None:
            ck = doc["policy"]["checkpoint"]
            doc["policy"]["checkpoint"] = (_member_digest(ck) if isinstance(ck, str)
                                           else [_member_digest(m) for m in ck])  # fmt: skip
        if doc["cosearch"] is not None and doc["cosearch"]["quality"] is not None:
            doc["cosearch"]["quality"] = _digest(doc["cosearch"]["quality"])
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def legacy_fingerprint(self, shard_size: int | None = None) -> str:
        """The fingerprint sweeps written before 2026-11-28 carry (paths, not contents): such a
        sweep still resumes, with the paths as they were given."""
        doc = self._fingerprint_doc(shard_size)
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def _fingerprint_doc(self, shard_size: int | None) -> dict:
        doc = dataclasses.asdict(self)
        doc["shard_size"] = self.shard_size if shard_size is None else shard_size
        doc.pop("heatmap")
        return doc


def _digest(path: str) -> str:
    """sha256 of a file's bytes, or of a training run's policy files (config.json and the
    checkpoints, best.msgpack included), in order; "missing" for a file that is not there
    (any later run differs)."""
    p = Path(path)
    files = (
        [p]
        if not p.is_dir()
        else sorted(f for f in p.iterdir() if f.name == "config.json" or f.suffix == ".msgpack")
    )
    h = hashlib.sha256()
    for f in files:
        try:
            with open(f, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            return "missing"
        h.update(f.name.encode())
    return h.hexdigest()


def _member_digest(text: str) -> str:
    """A policy member's digest: its run's policy files (`_digest`: config.json and every
    checkpoint, as before members could be named), or for `RUN:CHECKPOINT` its config.json
    and the named checkpoint only (a run still training, whose last checkpoint changes, is
    the same policy) with the name."""
    from hetjax.agents.ensemble import parse_member

    run, file = parse_member(text)
    if file is None:
        return _digest(str(run))
    files = [run / "config.json", run / file]
    return ":".join([*(_digest(str(f)) for f in files), str(text).rpartition(":")[2]])


# --- parsing ---------------------------------------------------------------------------------


def _err(where: str, value, why: str) -> SpecError:
    return SpecError(f"{where} = {value!r}: {why}")


def _int(where: str, v, low: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        raise _err(where, v, f"must be an integer >= {low}")
    return int(v)


def _num(where: str, v, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise _err(where, v, "must be a finite number")
    if v < 0 or (positive and v == 0):
        raise _err(where, v, "must be > 0" if positive else "must be >= 0")
    return float(v)


def _list(where: str, v, *, allow_scalar: bool = True) -> list:
    if isinstance(v, list):
        if not v:
            raise _err(where, v, "must not be empty")
        return v
    if allow_scalar:
        return [v]
    raise _err(where, v, "must be a list")


def _table(where: str, v) -> dict:
    if not isinstance(v, dict):
        raise _err(where, v, "must be a table")
    return v


def _keys(where: str, d: dict, allowed) -> None:
    for k in d:
        if k not in allowed:
            raise SpecError(f"{where}.{k}: unknown key; use one of {', '.join(sorted(allowed))}")


def _str(where: str, v) -> str:
    if not isinstance(v, str) or not v:
        raise _err(where, v, "must be a non-empty string")
    return v


def _path(base: Path, p, where: str = "path") -> str:
    _str(where, p)
    return str(p if os.path.isabs(p) else base / p)


def _models(doc, base: Path) -> tuple[ModelSpec, ...]:
    from hetjax.graphs.transformers import MODELS, TransformerConfig

    out: list[ModelSpec] = []
    entries = doc.get("models")
    if entries is None:
        raise SpecError("models: missing; add at least one [[models]] entry")
    for i, e in enumerate(_list("models", entries, allow_scalar=False)):
        w = f"models[{i}]"
        if isinstance(e, str):
            e = {"name": e}
        e = _table(w, e)
        _keys(w, e, {"name", "onnx", "seq_len", "dims", "blocks", "base", "label", *GRID_FIELDS})
        kinds = [k for k in ("name", "onnx", "base") if k in e]
        if len(kinds) != 1:
            raise SpecError(f"{w}: give exactly one of name, onnx or base (got {kinds or 'none'})")
        own = None if "label" not in e else _str(f"{w}.label", e["label"])
        if "onnx" in e:
            path = _path(base, e["onnx"], f"{w}.onnx")
            if not Path(path).is_file():
                raise _err(f"{w}.onnx", e["onnx"], "no such file")
            dims = _table(f"{w}.dims", e.get("dims", {}))
            dims = tuple((str(k), _int(f"{w}.dims.{k}", v, 1)) for k, v in sorted(dims.items()))
            seq = None if "seq_len" not in e else _int(f"{w}.seq_len", e["seq_len"], 1)
            blocks = None if "blocks" not in e else _str(f"{w}.blocks", e["blocks"])
            out.append(ModelSpec(label=own or Path(path).stem, source=path, seq_len=seq,
                                 dims=dims, blocks=blocks, onnx=True))  # fmt: skip
            continue
        for k in ("dims", "blocks"):
            if k in e:
                raise SpecError(f"{w}.{k}: applies to ONNX models only")
        name = _str(f"{w}.{kinds[0]}", e[kinds[0]])
        if name not in MODELS:
            key = "name" if "name" in e else "base"
            raise _err(f"{w}.{key}", name, f"unknown model; built-in: {', '.join(MODELS)}")
        grid = {k: [_int(f"{w}.{k}", v, 1) for v in _list(f"{w}.{k}", e[k])]
                for k in GRID_FIELDS if k in e}  # fmt: skip
        if "name" in e and any(k != "seq_len" for k in grid):
            raise SpecError(f"{w}: a grid over {sorted(grid)} needs base = MODEL, not name")
        keys = list(grid)
        varying = {k for k in keys if len(set(grid[k])) > 1}
        kept = 0
        for combo in itertools.product(*grid.values()):
            fields = tuple(zip(keys, combo, strict=True))
            values = dict(fields)
            seq = values.get("seq_len")
            named = [(k, v) for k, v in fields if k in varying] or fields  # what tells them apart
            label = (own or name) + "".join(f"-{_SHORT[k]}{v}" for k, v in named)
            if own is not None and not grid:
                label = own
            m = ModelSpec(label=label, source=name, seq_len=seq, fields=fields)
            try:
                cfg = m.config()
                if not isinstance(cfg, TransformerConfig):
                    raise TypeError
                cfg.tokens(seq)
            except HetjaxError as err:
                if "divisible" in str(err):  # a grid of widths x heads: skip the misfits
                    continue
                raise SpecError(f"{w} ({label}): {err}") from None
            out.append(m)
            kept += 1
        if kept == 0:
            raise SpecError(f"{w}: no valid combination (d_model must be divisible by n_heads)")
    labels = [m.label for m in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise SpecError(f"models: {dup[0]!r} appears twice; give the entries a label")
    seen: dict = {}
    for m in out:  # one model twice (under two labels) would only repeat its rows
        key = _identity(m)
        if key in seen:
            raise SpecError(f"models: {m.label!r} is the same model as {seen[key]!r}")
        seen[key] = m.label
    return tuple(out)


def _identity(m: ModelSpec):
    """What makes two model entries the same model (labels aside)."""
    if m.onnx:
        return ("onnx", os.path.realpath(m.source), m.seq_len, m.dims, m.blocks)
    cfg = m.config()
    return ("config", dataclasses.replace(cfg, name="", published_params=None),
            cfg.tokens(m.seq_len))  # fmt: skip


_SHORT = {"n_layers": "L", "d_model": "d", "n_heads": "h", "d_ff": "ff", "seq_len": "s"}


def _platforms(doc, base: Path) -> tuple[PlatformSource, ...]:
    from hetjax.hardware import PRESETS
    from hetjax.hardware.presets import LINKS
    from hetjax.hardware.sample import MAX_SPREAD

    entries = doc.get("platforms")
    if entries is None:
        raise SpecError("platforms: missing; add at least one [[platforms]] entry")
    out = []
    for i, e in enumerate(_list("platforms", entries, allow_scalar=False)):
        w = f"platforms[{i}]"
        if isinstance(e, str):
            e = {"preset": e}
        e = _table(w, e)
        _keys(w, e, {"preset", "file", "sample", "n", "spread", "links", "label"})
        kinds = [k for k in ("preset", "file", "sample") if k in e]
        if len(kinds) != 1:
            raise SpecError(
                f"{w}: give exactly one of preset, file or sample (got {kinds or 'none'})"
            )
        kind = kinds[0]
        value = _str(f"{w}.{kind}", e[kind])
        if kind in ("preset", "sample") and value not in PRESETS:
            raise _err(f"{w}.{kind}", value, f"unknown preset; presets: {', '.join(PRESETS)}")
        if kind != "sample":
            for k in ("n", "spread", "links"):
                if k in e:
                    raise SpecError(f"{w}.{k}: applies to sampled platforms only")
        if kind == "file":
            value = _path(base, value, f"{w}.file")
            _check_platform_file(f"{w}.file", e["file"], value)
        n = _int(f"{w}.n", e.get("n", 1), 1) if kind == "sample" else 1
        spread = _num(f"{w}.spread", e.get("spread", 2.0))
        if not 1.0 <= spread <= MAX_SPREAD:
            raise _err(f"{w}.spread", spread, f"must be in [1, {MAX_SPREAD:g}]")
        links = None
        if "links" in e:
            links = tuple(
                _str(f"{w}.links", x) for x in _list(f"{w}.links", e["links"], allow_scalar=False)
            )
            bad = [x for x in links if x not in LINKS]
            if bad:
                raise _err(f"{w}.links", bad[0], f"unknown link type; known: {', '.join(LINKS)}")
        label = (
            _str(f"{w}.label", e["label"])
            if "label" in e
            else f"{kind}:{Path(str(e[kind])).stem}"
            if kind != "preset"
            else e[kind]
        )
        out.append(PlatformSource(label=label, kind=kind, name=value, n=n, spread=spread,
                                  links=links))  # fmt: skip
    labels = [p.label for p in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise SpecError(f"platforms: {dup[0]!r} appears twice; give one of them a label")
    return tuple(out)


def _check_platform_file(where: str, given, path: str) -> None:
    import hetjax as hj

    if not Path(path).is_file():
        raise _err(where, given, "no such file")
    try:
        hj.hardware.validate(hj.hardware.load(path))
    except HetjaxError as err:
        raise _err(where, given, str(err)) from None
    except (ValueError, TypeError, KeyError, OSError, AttributeError) as err:
        raise _err(where, given, f"not a valid platform file ({type(err).__name__})") from None


def _overrides(doc) -> tuple[Override, ...]:
    out = []
    for i, e in enumerate(_list("overrides", doc.get("overrides", []) or [{}])):
        if not e:
            continue
        w = f"overrides[{i}]"
        e = _table(w, e)
        _keys(w, e, {"field", "set", "scale", "device"})
        field = e.get("field")
        if field not in OVERRIDE_FIELDS:
            raise _err(f"{w}.field", field, f"use one of {', '.join(OVERRIDE_FIELDS)}")
        modes = [k for k in ("set", "scale") if k in e]
        if len(modes) != 1:
            raise SpecError(f"{w}: give exactly one of set or scale (got {modes or 'none'})")
        mode = modes[0]
        values = tuple(_num(f"{w}.{mode}", v, positive=mode == "scale" or field in
                            ("mem_bw", "mem_capacity", "link_bw")) for v in _list(f"{w}.{mode}",
                       e[mode]))  # fmt: skip
        if field == "peak" and mode == "set" and "device" not in e:
            raise SpecError(f"{w}: setting peak needs a device (peak of device 0 must stay > 0)")
        dev = None if "device" not in e else _int(f"{w}.device", e["device"], 0)
        out.append(Override(field=field, mode=mode, values=values, device=dev))
    cols = [o.column for o in out]
    dup = sorted({x for x in cols if cols.count(x) > 1})
    if dup:
        raise SpecError(f"overrides: {dup[0]} appears twice")
    return tuple(out)


def _weights(doc) -> tuple[tuple[float, float, float], ...]:
    v = doc.get("weights", [[0.6, 0.3, 0.1]])
    if isinstance(v, dict):
        _keys("weights", v, {"alpha", "beta", "gamma"})
        grids = [[_num(f"weights.{k}", x) for x in _list(f"weights.{k}", v.get(k, d))]
                 for k, d in (("alpha", 0.6), ("beta", 0.3), ("gamma", 0.1))]  # fmt: skip
        sets = list(itertools.product(*grids))
    else:
        v = _list("weights", v, allow_scalar=False)
        if all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v):
            v = [v]  # one weight setting given flat, [alpha, beta, gamma]
        sets = []
        for i, s in enumerate(v):
            if not isinstance(s, list) or len(s) != 3:
                raise _err(f"weights[{i}]", s, "must be [alpha, beta, gamma]")
            sets.append(tuple(_num(f"weights[{i}]", x) for x in s))
    for i, s in enumerate(sets):
        if sum(s) == 0:
            raise _err(f"weights[{i}]", list(s), "alpha + beta + gamma must be > 0")
    return tuple(dict.fromkeys(tuple(s) for s in sets))


def _batch_sets(doc) -> tuple[tuple[float, ...], ...]:
    v = doc.get("batches", [[1, 2, 4, 8, 16, 32]])
    v = _list("batches", v, allow_scalar=False)
    if all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v):
        v = [v]  # one batch set given flat
    out = []
    for i, s in enumerate(v):
        s = _list(f"batches[{i}]", s, allow_scalar=False)
        vals = tuple(_num(f"batches[{i}]", x, positive=True) for x in s)
        if any(b < 1 for b in vals):
            raise _err(f"batches[{i}]", list(s), "every batch must be >= 1")
        out.append(vals)
    return tuple(dict.fromkeys(out))


def _methods(doc) -> tuple[str, ...]:
    from hetjax.baselines import STRATEGIES

    v = _list("methods", doc.get("methods", ["baselines", "exact"]), allow_scalar=False)
    for m in v:
        if not isinstance(m, str) or (m not in METHODS and m not in STRATEGIES):
            raise _err("methods", m, f"use {', '.join(METHODS)} or a baseline: "
                       f"{', '.join(STRATEGIES)}")  # fmt: skip
    return tuple(dict.fromkeys(v))


def parse(doc: dict, base_dir: str | os.PathLike = ".") -> SweepSpec:
    """A `SweepSpec` from a parsed TOML document (relative paths against `base_dir`)."""
    doc = _table("sweep", doc)
    _keys("sweep", doc, _TOP_KEYS)
    base = Path(base_dir)
    methods = _methods(doc)
    seeds = tuple(dict.fromkeys(_int("seeds", s, 0) for s in _list("seeds", doc.get("seeds", 0))))
    policy = None
    if "policy" in methods or "policy" in doc:
        if "policy" not in methods:
            raise SpecError('policy: a [policy] table needs "policy" in methods')
        p = _table("policy", doc.get("policy"))
        _keys("policy", p, {"checkpoint", "best_of"})
        if "checkpoint" not in p:
            raise SpecError("policy.checkpoint: missing (a training run directory)")
        ck = p["checkpoint"]
        if isinstance(ck, (list, tuple)):  # an ensemble
            if not ck:
                raise _err("policy.checkpoint", ck, "give at least one run directory")
            ck = tuple(_path(base, m, f"policy.checkpoint[{i}]") for i, m in enumerate(ck))
        else:
            ck = _path(base, ck, "policy.checkpoint")
        policy = PolicySpec(checkpoint=ck, best_of=_int("policy.best_of", p.get("best_of", 0)))
    cos = None
    if "cosearch" in doc:
        c = _table("cosearch", doc["cosearch"])
        _keys("cosearch", c, {"capacity", "quality", "latency_budget_ms"})
        cap = c.get("capacity", "params")
        if cap not in ("params", "flops", "quality"):
            raise _err("cosearch.capacity", cap, "use params, flops or quality")
        q = None
        if cap == "quality":
            if "quality" not in c:
                raise SpecError("cosearch.quality: missing (a CSV file with columns model,quality)")
            q = _path(base, c["quality"], "cosearch.quality")
            if not Path(q).is_file():
                raise _err("cosearch.quality", c["quality"], "no such file")
        budget = c.get("latency_budget_ms")
        if budget is not None:
            budget = _num("cosearch.latency_budget_ms", budget, positive=True)
        if "exact" not in methods:
            raise SpecError('cosearch: needs "exact" in methods (models at their optimum)')
        cos = CoSearch(capacity=cap, quality=q, latency_budget_ms=budget)
    heat = None
    if "figures" in doc:
        f = _table("figures", doc["figures"])
        _keys("figures", f, {"heatmap"})
        if "heatmap" in f:
            h = f["heatmap"]
            if not isinstance(h, list) or len(h) != 2 or not all(isinstance(x, str) for x in h):
                raise _err("figures.heatmap", h, "must be two column names")
            heat = (h[0], h[1])
            known = [*HEATMAP_COLUMNS, *(o.column for o in _overrides(doc))]
            for c in heat:
                if c not in known:
                    raise _err("figures.heatmap", h, f"{c!r} is no configuration column of the "
                               f"table; use {', '.join(known)}")  # fmt: skip
    name = doc.get("name", "sweep")
    if not isinstance(name, str) or not name:
        raise _err("name", name, "must be a non-empty string")
    spec = SweepSpec(
        name=name,
        models=_models(doc, base),
        platforms=_platforms(doc, base),
        overrides=_overrides(doc),
        weights=_weights(doc),
        batch_sets=_batch_sets(doc),
        seeds=seeds,
        methods=methods,
        policy=policy,
        shard_size=_int("shard_size", doc.get("shard_size", 256), 1),
        cosearch=cos,
        heatmap=heat,
    )
    if policy is not None:
        _check_policy(spec)
    return spec


def _check_policy(spec: SweepSpec) -> None:
    """The policy places every model of the sweep (those it was not trained on zero-shot),
    choosing from the batch set it was trained with: every batch set of the sweep must be that
    one, so that the policy's rows compare with the other methods' (and its gap with the
    optimum's) over the same choices."""
    from hetjax.agents.ensemble import ensemble_config, parse_member
    from hetjax.agents.jobs import load_config
    from hetjax.errors import CheckpointError, HetjaxError

    members = spec.policy.members
    many = not isinstance(spec.policy.checkpoint, str)
    configs = []
    for i, m in enumerate(members):
        where = f"policy.checkpoint[{i}]" if many else "policy.checkpoint"
        if not isinstance(m, str) or not m:
            raise _err(where, m, "must be a run directory or RUN:CHECKPOINT")
        run, file = parse_member(m)
        if not (run / "config.json").is_file():
            raise _err(where, m, "no config.json (not a training run)")
        if file is not None and not (run / file).is_file():
            raise _err(where, m, f"{run / file} does not exist")
        try:
            configs.append(load_config(run))
        except (OSError, ValueError, TypeError, AttributeError, KeyError, HetjaxError) as err:
            raise _err(where, m, f"unreadable config.json ({type(err).__name__}: "
                       f"{err})") from None  # fmt: skip
    try:  # members share the network and the task (batches included), before any work
        config = ensemble_config(configs, members)
    except CheckpointError as err:  # (it names the member, the field and both values)
        raise SpecError(f"policy.checkpoint: {err}") from None
    own = tuple(float(b) for b in config.batches)
    for i, m in enumerate(spec.models):  # the same ops as every other method's graph
        if m.onnx and config.granularity != "block":
            raise _err(f"models[{i}]", m.label, f"an ONNX file is placed by every other method "
                       f"fused into blocks, and the policy ({spec.policy.checkpoint!r}) was "
                       f"trained at granularity {config.granularity!r}, where it would place "
                       "the file's unfused ops")  # fmt: skip
    for i, b in enumerate(spec.batch_sets):
        if tuple(b) != own:
            raise _err(f"batches[{i}]", [f"{x:g}" for x in b],
                       "with the policy method every batch set must be the policy's own, "
                       f"{[f'{x:g}' for x in own]} (its rows are compared over the same "
                       "batch choices)")  # fmt: skip


def check(spec: SweepSpec) -> SweepSpec:
    """A spec built in code, checked as `parse` checks a TOML one (one-line `SpecError`
    naming the field) and with lists made tuples; `hj.sweep.run` calls it first."""
    from hetjax.baselines import STRATEGIES

    if not isinstance(spec, SweepSpec):
        raise _err("spec", type(spec).__name__, "must be a SweepSpec (or use hj.sweep.load)")
    _str("name", spec.name)

    def items(where, v, cls):
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or not v:
            raise _err(where, v, "must be a non-empty tuple")
        for i, x in enumerate(v):
            if not isinstance(x, cls):
                raise _err(f"{where}[{i}]", x, f"must be a {cls.__name__}")
        return tuple(v)

    models = items("models", spec.models, ModelSpec)
    platforms = items("platforms", spec.platforms, PlatformSource)
    overrides = () if not spec.overrides else items("overrides", spec.overrides, Override)
    for i, m in enumerate(models):
        _str(f"models[{i}].label", m.label)
        _str(f"models[{i}].source", m.source)
    for i, p in enumerate(platforms):
        if p.kind not in ("preset", "file", "sample"):
            raise _err(f"platforms[{i}].kind", p.kind, "use preset, file or sample")
        _str(f"platforms[{i}].name", p.name)
        _int(f"platforms[{i}].n", p.n, 1)
    checked = []
    for i, o in enumerate(overrides):
        if o.field not in OVERRIDE_FIELDS:
            raise _err(f"overrides[{i}].field", o.field, f"use one of {', '.join(OVERRIDE_FIELDS)}")
        if o.mode not in ("set", "scale"):
            raise _err(f"overrides[{i}].mode", o.mode, "use set or scale")
        values = tuple(_num(f"overrides[{i}].values", v) for v in _list(
            f"overrides[{i}].values", list(o.values), allow_scalar=False))  # fmt: skip
        checked.append(dataclasses.replace(o, values=values))
    overrides = tuple(checked)
    for where, group in (("models", [m.label for m in models]),
                         ("platforms", [p.label for p in platforms])):  # fmt: skip
        dup = sorted({x for x in group if group.count(x) > 1})
        if dup:
            raise SpecError(f"{where}: {dup[0]!r} appears twice")
    weights = []
    for i, w in enumerate(_list("weights", list(spec.weights), allow_scalar=False)):
        if not isinstance(w, (list, tuple)) or len(w) != 3:
            raise _err(f"weights[{i}]", w, "must be (alpha, beta, gamma)")
        w = tuple(_num(f"weights[{i}]", x) for x in w)
        if sum(w) == 0:
            raise _err(f"weights[{i}]", list(w), "alpha + beta + gamma must be > 0")
        weights.append(w)
    batch_sets = []
    for i, b in enumerate(_list("batch_sets", list(spec.batch_sets), allow_scalar=False)):
        if not isinstance(b, (list, tuple)):
            raise _err(f"batch_sets[{i}]", b, "must be a tuple of batches")
        b = tuple(_num(f"batch_sets[{i}]", x, positive=True)
                  for x in _list(f"batch_sets[{i}]", list(b), allow_scalar=False))  # fmt: skip
        if any(x < 1 for x in b):
            raise _err(f"batch_sets[{i}]", list(b), "every batch must be >= 1")
        batch_sets.append(b)
    seeds = tuple(_int("seeds", x, 0) for x in _list("seeds", list(spec.seeds), allow_scalar=False))
    methods = _list("methods", list(spec.methods), allow_scalar=False)
    for m in methods:
        if not isinstance(m, str) or (m not in METHODS and m not in STRATEGIES):
            raise _err("methods", m, f"use {', '.join(METHODS)} or a baseline: "
                       f"{', '.join(STRATEGIES)}")  # fmt: skip
    if ("policy" in methods) != (spec.policy is not None):
        raise SpecError('policy: a PolicySpec goes with "policy" in methods, and only with it')
    if spec.cosearch is not None and "exact" not in methods:
        raise SpecError('cosearch: needs "exact" in methods (models at their optimum)')
    _int("shard_size", spec.shard_size, 1)
    if spec.heatmap is not None:
        known = [*HEATMAP_COLUMNS, *(o.column for o in overrides)]
        if len(spec.heatmap) != 2 or any(c not in known for c in spec.heatmap):
            raise _err("heatmap", spec.heatmap, f"two of: {', '.join(known)}")
    out = dataclasses.replace(
        spec, models=models, platforms=platforms, overrides=tuple(overrides),
        weights=tuple(dict.fromkeys(weights)), batch_sets=tuple(dict.fromkeys(batch_sets)),
        seeds=tuple(dict.fromkeys(seeds)), methods=tuple(dict.fromkeys(methods)),
        heatmap=None if spec.heatmap is None else tuple(spec.heatmap),
    )  # fmt: skip
    if out.policy is not None:  # paths as strings, an ensemble's members as a tuple
        ck = out.policy.checkpoint
        ck = out.policy.members[0] if isinstance(ck, (str, os.PathLike)) else out.policy.members
        out = dataclasses.replace(out, policy=dataclasses.replace(out.policy, checkpoint=ck))
        _check_policy(out)
    return out


def load(path: str | os.PathLike) -> SweepSpec:
    """Read and check a SWEEP.toml (relative paths in it are relative to its folder)."""
    p = Path(path)
    if p.is_dir():
        raise _err("SWEEP.toml", str(path), "is a directory")
    try:
        text = p.read_bytes()
    except OSError as err:
        raise _err("SWEEP.toml", str(path), err.strerror or str(err)) from None
    try:
        doc = tomllib.loads(text.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise _err("SWEEP.toml", str(path), f"not valid TOML ({err})") from None
    return parse(doc, p.parent)
