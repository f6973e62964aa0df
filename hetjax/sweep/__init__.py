"""Declarative sweeps: models x platforms x weights x batch sets x seeds x methods.

    spec = hj.sweep.load("examples/sweep_bert_edge.toml")
    table = hj.sweep.run(spec, "runs/sweep")      # pyarrow.Table; also Parquet + CSV files
    hj.sweep.figures.plot_all(spec, table, "runs/sweep")

The command `hetjax sweep SWEEP.toml` does the same with a progress bar and a printed summary.
A sweep is cut into shards, each written atomically as it finishes (`resume=True` skips the
finished ones); shards run on Ray workers (`hetjax.distributed`). See docs/sweep.md.
"""

from hetjax.sweep import cosearch, figures
from hetjax.sweep.runner import (
    PLATFORM_CHUNK,
    Shard,
    chunk_size,
    platforms_of,
    prepare,
    run,
    run_shard,
    run_shards,
    shards_of,
    summary,
)
from hetjax.sweep.spec import (
    GRID_FIELDS,
    HEATMAP_COLUMNS,
    METHODS,
    OVERRIDE_FIELDS,
    CoSearch,
    ModelSpec,
    Override,
    PlatformSource,
    PolicySpec,
    SweepSpec,
    check,
    load,
    parse,
)

__all__ = [
    "cosearch",
    "figures",
    "load",
    "parse",
    "check",
    "run",
    "prepare",
    "run_shard",
    "run_shards",
    "summary",
    "platforms_of",
    "shards_of",
    "Shard",
    "PLATFORM_CHUNK",
    "chunk_size",
    "SweepSpec",
    "ModelSpec",
    "PlatformSource",
    "Override",
    "PolicySpec",
    "CoSearch",
    "GRID_FIELDS",
    "OVERRIDE_FIELDS",
    "METHODS",
    "HEATMAP_COLUMNS",
]
