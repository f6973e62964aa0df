"""An independent float64 reference of the SPEC v1 cost model, in plain Python loops, with the
weight-streaming extension 1.1 (`Platform.weight_bw > 0`, docs/model.md) and version 2.0
(numeric formats per block and compressed transfers, SPEC "Version 2.0").

Written from SPEC.md (and the extension's definition in docs/model.md), not from
`hetjax.cost`, so that tests can check `hj.evaluate` against a second reading of the
specification. It is slow (one Python step per op and predecessor slot) and meant for tests
and debugging only, never for a hot path.

Degenerate cases the SPEC leaves open, resolved as `hetjax.cost` resolves them:

- a graph with no real op has latency 0;
- throughput is 0 when the bottleneck max(max_d busy[d], max_(e,d) link_busy[e,d]) is 0;
- transfer_share is 0 when the simulated latency is 0;
- an unplaceable op still counts toward `busy` and `mem_used` of the device it was run on
  (its own device if that is real and in range, else device 0), with t_comp = 0;
- layer_time_std is the population standard deviation over real blocks (0 if there are none);
- (2.0) a format outside 0..2 makes its op unplaceable; a code outside 0..2 on a tensor that
  crosses a link makes the plan infeasible (the transfer is then costed as uncoded); a coded
  transfer from or to a device with codec_bw = 0 is infeasible too, that end's pass costed 0 s;
- (2.0) formats or codes given per op that differ inside a block charge the block the largest
  of its ops' losses.

`score_reference` guards its ratios the same way (documented on the function).
"""

from __future__ import annotations

import math

import numpy as np

from hetjax.cost import DEFAULT_WEIGHTS, Metrics
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["evaluate_reference", "score_reference", "METRIC_FIELDS"]

METRIC_FIELDS = (
    "latency",
    "throughput",
    "energy",
    "busy",
    "link_busy",
    "moved",
    "block_time",
    "layer_time_std",
    "transfer_share",
    "mem_used",
    "feasible",
    "unplaceable",
    "quality_loss",
)

# SPEC "Version 2.0", written out again here (not imported) as the second reading.
_W_BITS = {0: 16, 1: 8, 2: 4}
_A_BITS = {0: 16, 1: 8, 2: 16}
_T_BITS = {0: 16, 1: 8, 2: 4}


def _f64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def evaluate_reference(
    graph: LayerGraph, platform: Platform, placement, batch=None, fmt=None, code=None
) -> dict:
    """SPEC metrics of one plan, in float64, as a dict keyed like `hj.Metrics`.

    `graph` and `platform` are single (unbatched); `placement` is int[N] (device per op, or a
    `hj.Plan`, whose batch, formats and codes are then used where these arguments are None)
    and `batch` the samples per batch; `fmt` and `code` (cost model 2.0) are int[N] per op,
    None for all 0. Units: s, samples/s, J, bytes, accuracy points. Arrays are numpy.
    """
    if hasattr(placement, "placement") and hasattr(placement, "batch"):
        batch = placement.batch if batch is None else batch
        fmt = placement.fmt if fmt is None else fmt
        code = placement.code if code is None else code
        placement = placement.placement
    op_class = np.asarray(graph.op_class).astype(int)
    block = np.asarray(graph.block).astype(int)
    block_mask = np.asarray(graph.block_mask).astype(bool)
    flops = _f64(graph.flops)
    act = _f64(graph.act_bytes)
    params = _f64(graph.param_bytes)
    out = _f64(graph.out_bytes)
    preds = np.asarray(graph.preds).astype(int)
    op_real = np.asarray(graph.op_mask).astype(bool)
    if op_class.ndim != 1:
        raise ValueError("evaluate_reference takes a single (unbatched) graph")

    peak = _f64(platform.peak)
    mem_bw = _f64(platform.mem_bw)
    launch = _f64(platform.launch)
    capacity = _f64(platform.mem_capacity)
    p_busy = _f64(platform.p_busy)
    p_idle = _f64(platform.p_idle)
    b_half = _f64(platform.b_half)
    weight_bw = _f64(platform.weight_bw)
    link_bw = _f64(platform.link_bw)
    link_lat = _f64(platform.link_latency)
    link_en = _f64(platform.link_energy)
    dev_real = np.asarray(platform.device_mask).astype(bool)
    if mem_bw.ndim != 1:
        raise ValueError("evaluate_reference takes a single (unbatched) platform")

    placement = np.asarray(placement).astype(int)
    b = float(np.asarray(batch, np.float64))
    n, m, p_slots, n_dev = op_class.shape[0], block_mask.shape[0], preds.shape[1], mem_bw.shape[0]
    fmt = np.zeros(n, int) if fmt is None else np.asarray(fmt).astype(int)
    code = np.zeros(n, int) if code is None else np.asarray(code).astype(int)
    fmt_speedup = _f64(platform.fmt_speedup)
    codec_bw = _f64(platform.codec_bw)
    fmt_loss = _f64(graph.fmt_loss)
    code_loss = _f64(graph.code_loss)

    # Device each real op runs on, its unplaceability and its duration.
    run_dev = [0] * n
    unplaceable = [False] * n
    dur = [0.0] * n
    params = params.copy()  # primed by the op's format (2.0)
    act = act.copy()
    for i in range(n):
        if not op_real[i]:
            continue
        d, c, q = int(placement[i]), int(op_class[i]), int(fmt[i])
        if d < 0 or d >= n_dev or not dev_real[d]:
            unplaceable[i], d = True, 0
        elif peak[d, c] == 0.0:
            unplaceable[i] = True
        run_dev[i] = d
        p = peak[d, c]
        if q not in _W_BITS:  # not a format
            unplaceable[i] = True
        elif c in (0, 1) and q > 0:  # EMBED and MATMUL in 8 or 4 bit
            params[i] *= _W_BITS[q] / 16
            if fmt_speedup[d, q] == 0.0:
                unplaceable[i] = True
            if c == 1:
                act[i] *= _A_BITS[q] / 16
                p *= fmt_speedup[d, q]
        t_comp = 0.0 if unplaceable[i] else flops[i] * (b + b_half[d]) / p
        if weight_bw[d] > 0 and c != 0:  # weight streaming (cost model 1.1), not for EMBED
            t_mem = b * act[i] / mem_bw[d]
            dur[i] = launch[d] + max(t_comp, t_mem) + params[i] / weight_bw[d]
        else:
            t_mem = (params[i] + b * act[i]) / mem_bw[d]
            dur[i] = launch[d] + max(t_comp, t_mem)

    # The list schedule, op by op in index order.
    finish = [0.0] * n
    dev_free = [0.0] * n_dev
    link_free = [[0.0] * n_dev for _ in range(n_dev)]
    link_busy = [[0.0] * n_dev for _ in range(n_dev)]
    moved = [[0.0] * n_dev for _ in range(n_dev)]
    xfer_time = [0.0] * m
    arrival: dict[tuple[int, int], float] = {}
    codec_fail = False
    crossed_blocks: dict[int, list[int]] = {}  # block -> codes of its ops' outputs that crossed
    for i in range(n):
        if not op_real[i]:
            continue
        d = run_dev[i]
        ready = 0.0
        for k in range(p_slots):
            p = int(preds[i, k])
            if p < 0 or not op_real[p]:
                continue
            e = run_dev[p]
            if e == d:
                a = finish[p]
            elif (p, d) in arrival:
                a = arrival[(p, d)]
            else:
                s = max(finish[p], link_free[e][d])
                k = int(code[p])
                if k not in _T_BITS:  # not a code: costed as uncoded, the plan is infeasible
                    codec_fail, k = True, 0
                nbytes = b * out[p] * _T_BITS[k] / 16
                x = link_lat[e, d] + nbytes / link_bw[e, d]
                if k > 0:
                    passes = b * out[p] * (1 + _T_BITS[k] / 16)
                    for end in (e, d):  # an end without a codec: infeasible, its pass 0 s
                        if codec_bw[end] == 0:
                            codec_fail = True
                        else:
                            x += passes / codec_bw[end]
                crossed_blocks.setdefault(int(block[p]), []).append(int(code[p]))
                a = s + x
                link_free[e][d] = a
                arrival[(p, d)] = a
                link_busy[e][d] += x
                moved[e][d] += nbytes
                xfer_time[block[i]] += x
            ready = max(ready, a)
        start = max(dev_free[d], ready)
        finish[i] = start + dur[i]
        dev_free[d] = finish[i]

    real_ops = [i for i in range(n) if op_real[i]]
    latency = max((finish[i] for i in real_ops), default=0.0)

    busy = [0.0] * n_dev
    mem_params = [0.0] * n_dev
    max_act: list[float | None] = [None] * n_dev
    block_time = [0.0] * m
    for i in real_ops:
        d = run_dev[i]
        busy[d] += dur[i]
        mem_params[d] += params[i]
        max_act[d] = act[i] if max_act[d] is None else max(max_act[d], act[i])
        block_time[block[i]] += dur[i]
    for j in range(m):
        block_time[j] = block_time[j] + xfer_time[j] if block_mask[j] else 0.0
    mem_used = [0.0 if max_act[d] is None else mem_params[d] + b * max_act[d] for d in range(n_dev)]

    bottleneck = max(max(busy), max(max(row) for row in link_busy))
    throughput = b / bottleneck if bottleneck > 0 else 0.0

    energy = 0.0
    for d in range(n_dev):
        if dev_real[d]:
            energy += p_busy[d] * busy[d] + p_idle[d] * (latency - busy[d])
    for e in range(n_dev):
        for d in range(n_dev):
            if e != d and dev_real[e] and dev_real[d]:
                energy += link_en[e, d] * moved[e][d]

    real_blocks = [block_time[j] for j in range(m) if block_mask[j]]
    if real_blocks:
        mean = sum(real_blocks) / len(real_blocks)
        std = math.sqrt(sum((t - mean) ** 2 for t in real_blocks) / len(real_blocks))
    else:
        std = 0.0
    total_link = sum(sum(row) for row in link_busy)
    transfer_share = total_link / latency if latency > 0 else 0.0

    n_unplaceable = sum(unplaceable)
    fits = all(mem_used[d] <= capacity[d] for d in range(n_dev) if dev_real[d])
    feasible = n_unplaceable == 0 and fits and not codec_fail

    # Quality loss (2.0): each real block's format loss, plus its code loss if one of its
    # outputs crossed a link; per-op values that differ inside a block: the largest.
    quality = 0.0
    for j in range(m):
        if not block_mask[j]:
            continue
        ops = [i for i in real_ops if block[i] == j]
        quality += max((fmt_loss[j, fmt[i]] for i in ops if fmt[i] in _W_BITS), default=0.0)
        codes = [k for k in crossed_blocks.get(j, []) if k in _T_BITS]
        quality += max((code_loss[j, k] for k in codes), default=0.0)
    if not feasible:
        latency, energy, throughput = math.inf, math.inf, 0.0

    return {
        "latency": latency,
        "throughput": throughput,
        "energy": energy,
        "busy": np.array(busy),
        "link_busy": np.array(link_busy),
        "moved": np.array(moved),
        "block_time": np.array(block_time),
        "layer_time_std": std,
        "transfer_share": transfer_share,
        "mem_used": np.array(mem_used),
        "feasible": bool(feasible),
        "unplaceable": int(n_unplaceable),
        "quality_loss": quality,
    }


def _get(m, field):
    return float(m[field] if isinstance(m, dict) else getattr(m, field))


def score_reference(
    m: dict | Metrics,
    ref: dict | Metrics,
    weights=DEFAULT_WEIGHTS,
    delta: float = 0.0,
    quality_budget: float = math.inf,
) -> float:
    """SPEC objective alpha*T_ref/T + beta*X/X_ref - gamma*E/E_ref - delta*quality_loss
    (unitless); -inf if infeasible or if quality_loss (points) exceeds `quality_budget`.

    `m` and `ref` are metrics of the plan and of the reference plan (dicts from
    `evaluate_reference` or `hj.Metrics`). Degenerate guards: T = 0 makes the latency ratio 1;
    X_ref = 0 or E_ref = 0 divides by 1 instead.
    """
    alpha, beta, gamma = (float(w) for w in weights)
    feasible = bool(m["feasible"] if isinstance(m, dict) else np.asarray(m.feasible))
    quality = _get(m, "quality_loss")
    if not feasible or quality > quality_budget:
        return -math.inf
    t, x, e = _get(m, "latency"), _get(m, "throughput"), _get(m, "energy")
    t_ref, x_ref, e_ref = _get(ref, "latency"), _get(ref, "throughput"), _get(ref, "energy")
    t_term = t_ref / t if t > 0 else 1.0
    x_ref = x_ref if x_ref > 0 else 1.0
    e_ref = e_ref if e_ref > 0 else 1.0
    return alpha * t_term + beta * x / x_ref - gamma * e / e_ref - float(delta) * quality
