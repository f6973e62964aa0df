"""Built-in Transformer layer graphs (BERT, GPT-2, ViT, LLaMA-style) from a `TransformerConfig`.

FLOP conventions (per sample, s tokens, width d, h heads; SPEC): a linear layer d_in -> d_out is
2*s*d_in*d_out FLOP with d_in*d_out (+d_out bias) weights; QK^T and PV are 2*s*s*d each; softmax
5*h*s*s; layer norm 8*s*d; RMS norm 6*s*d; GELU 8*s*d_ff; SiLU 5*s*d_ff; rotary embedding 3*s*d
per rotated tensor; attention scale+mask s*s*h; an add or elementwise product s*d; a table
gather s*d. Activation bytes are the tensors an op reads plus the one it writes.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from hetjax.errors import GraphError, UnknownNameError
from hetjax.graphs.core import (
    ATTENTION,
    ATTN,
    BLOCK_KINDS,
    CONTROL,
    ELEMWISE,
    EMBED,
    EMBEDDING,
    FFN,
    MATMUL,
    NORM,
    OP_CLASSES,
    OTHER,
    LayerGraph,
)

__all__ = ["TransformerConfig", "MODELS", "transformer", "config", "GraphBuilder"]


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a Transformer. `arch` picks the layer layout:

    - "bert": post-LN encoder, learned positions + token types, pooler head;
    - "gpt2": pre-LN decoder, learned positions, LM head tied to the token embedding;
    - "vit":  pre-LN encoder over image patches (conv patch embedding, class token), MLP head;
    - "llama": pre-RMSNorm decoder, rotary embedding, grouped-query attention, SwiGLU FFN.
    """

    name: str
    arch: str  # "bert" | "gpt2" | "vit" | "llama"
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    vocab_size: int = 30522
    max_positions: int = 512
    n_kv_heads: int | None = None  # grouped-query attention (llama); None = n_heads
    type_vocab_size: int = 2  # bert token types
    tied_lm_head: bool = False  # gpt2: LM head shares the token embedding table
    # one GEMM computes Q, K and V (GPT-2's c_attn); False: three projections (BERT, LLaMA)
    fused_qkv: bool = False
    image_size: int = 224  # vit
    patch_size: int = 16  # vit
    channels: int = 3  # vit
    num_classes: int = 1000  # vit classifier head
    default_seq_len: int = 128
    dtype_bytes: int = 2  # fp16 tensors and weights
    published_params: float | None = None  # parameter count from the model's paper / card

    def __post_init__(self):
        if self.arch not in ("bert", "gpt2", "vit", "llama"):
            raise GraphError(f"TransformerConfig.arch = {self.arch!r}: use bert/gpt2/vit/llama")
        for f in ("d_model", "n_layers", "n_heads", "d_ff", "dtype_bytes", "vocab_size"):
            if getattr(self, f) <= 0:
                raise GraphError(f"TransformerConfig.{f} = {getattr(self, f)}: must be > 0")
        if self.d_model % self.n_heads:
            raise GraphError(
                f"TransformerConfig: d_model={self.d_model} is not divisible by "
                f"n_heads={self.n_heads}"
            )
        if self.n_heads % self.kv_heads:
            raise GraphError(
                f"TransformerConfig: n_heads={self.n_heads} is not a multiple of "
                f"n_kv_heads={self.n_kv_heads}"
            )

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def tokens(self, seq_len: int | None) -> int:
        """Tokens per sample: seq_len for text models, patches + class token for ViT."""
        if self.arch == "vit":
            return (self.image_size // self.patch_size) ** 2 + 1
        whole = isinstance(seq_len, numbers.Integral) or (
            isinstance(seq_len, float) and seq_len.is_integer()
        )
        if seq_len is not None and (isinstance(seq_len, bool) or not whole):
            raise GraphError(f"seq_len = {seq_len!r}: must be a whole number of tokens >= 1")
        s = self.default_seq_len if seq_len is None else int(seq_len)
        if s < 1:
            raise GraphError(f"seq_len = {s}: must be >= 1")
        if s > self.max_positions:
            raise GraphError(
                f"seq_len = {s}: {self.name} has {self.max_positions} positions at most"
            )
        return s


def _bert(name, d, layers, heads, published):
    return TransformerConfig(
        name=name, arch="bert", d_model=d, n_layers=layers, n_heads=heads, d_ff=4 * d,
        published_params=published,
    )  # fmt: skip


# Published sizes: BERT (Devlin et al. 2019; Turc et al. 2019 for the small ones), GPT-2
# (Radford et al. 2019, HF model cards), ViT-B/16 (Dosovitskiy et al. 2021), TinyLlama-1.1B
# (Zhang et al. 2024; LLaMA-2 layout with grouped-query attention).
MODELS: dict[str, TransformerConfig] = {
    c.name: c
    for c in (
        _bert("bert-tiny", 128, 2, 2, 4.4e6),
        _bert("bert-mini", 256, 4, 4, 11.3e6),
        _bert("bert-small", 512, 4, 8, 29.1e6),
        _bert("bert-medium", 512, 8, 8, 41.7e6),
        _bert("bert-base", 768, 12, 12, 110e6),
        _bert("bert-large", 1024, 24, 16, 335e6),
        TransformerConfig(
            name="gpt2", arch="gpt2", d_model=768, n_layers=12, n_heads=12, d_ff=3072,
            vocab_size=50257, max_positions=1024, tied_lm_head=True, fused_qkv=True,
            published_params=124e6,
        ),
        TransformerConfig(
            name="gpt2-medium", arch="gpt2", d_model=1024, n_layers=24, n_heads=16, d_ff=4096,
            vocab_size=50257, max_positions=1024, tied_lm_head=True, fused_qkv=True,
            published_params=355e6,
        ),
        TransformerConfig(
            name="vit-b16", arch="vit", d_model=768, n_layers=12, n_heads=12, d_ff=3072,
            vocab_size=1, max_positions=197, published_params=86e6,
        ),
        TransformerConfig(
            name="tinyllama-1.1b", arch="llama", d_model=2048, n_layers=22, n_heads=32,
            n_kv_heads=4, d_ff=5632, vocab_size=32000, max_positions=2048,
            published_params=1.1e9,
        ),
    )
}  # fmt: skip


def config(name_or_config: str | TransformerConfig) -> TransformerConfig:
    """Look up a built-in config by name (or pass a config through)."""
    if isinstance(name_or_config, TransformerConfig):
        return name_or_config
    try:
        return MODELS[name_or_config]
    except KeyError:
        raise UnknownNameError(
            f"unknown model {name_or_config!r}; built-in models: {', '.join(MODELS)}"
        ) from None


def _index(value, names: tuple[str, ...], what: str) -> int:
    """An index into `names` given as an int or a name (any case); else a one-line GraphError."""
    if isinstance(value, str) and value.upper() in names:
        return names.index(value.upper())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        value_ok = False
    else:
        value_ok = 0 <= value < len(names)
    if not value_ok:
        raise GraphError(f"{what} = {value!r}: use 0..{len(names) - 1} or one of "
                         f"{', '.join(names)}")  # fmt: skip
    return int(value)


class GraphBuilder:
    """Append ops in topological order, grouped into blocks; `build()` returns a LayerGraph.

    Host-side helper shared by the built-in Transformers and the ONNX importer.
    """

    def __init__(self):
        self.ops: list[dict] = []
        self.block_kinds: list[int] = []
        self.block_names: list[str] = []

    def begin_block(self, kind: int, name: str = "") -> None:
        """Open a block of SPEC kind `kind` (0..3 or a name in `BLOCK_KINDS`) named `name`."""
        self.block_kinds.append(_index(kind, BLOCK_KINDS, f"GraphBuilder.begin_block {name!r}: "
                                       "kind"))  # fmt: skip
        self.block_names.append(name)

    def op(self, name, cls, flops, act_bytes, out_bytes, param_bytes=0.0, preds=()) -> int:
        """Append op `name` of SPEC class `cls` (0..5 or a name in `OP_CLASSES`) to the current
        block: FLOP, activation / output / parameter bytes per sample, predecessor op indices."""
        if not self.block_kinds:
            raise GraphError("GraphBuilder.op: call begin_block first")
        cls = _index(cls, OP_CLASSES, f"GraphBuilder.op {name!r}: cls")
        self.ops.append(
            dict(
                name=name, cls=cls, flops=float(flops), act=float(act_bytes),
                out=float(out_bytes), params=float(param_bytes),
                preds=list(dict.fromkeys(p for p in preds if p is not None)),
                block=len(self.block_kinds) - 1,
            )
        )  # fmt: skip
        return len(self.ops) - 1

    @property
    def op_names(self) -> list[str]:
        return [o["name"] for o in self.ops]

    def build(self, granularity: str = "block", p_max: int | None = None) -> LayerGraph:
        if granularity not in ("block", "op"):
            raise GraphError(f"granularity = {granularity!r}: use 'block' or 'op'")
        n = len(self.ops)
        p = max([len(o["preds"]) for o in self.ops] + [1]) if p_max is None else p_max
        preds = np.full((n, p), -1, np.int32)
        for i, o in enumerate(self.ops):
            if len(o["preds"]) > p:
                raise GraphError(f"op {o['name']!r} has {len(o['preds'])} predecessors > P={p}")
            preds[i, : len(o["preds"])] = o["preds"]
        op_block = np.array([o["block"] for o in self.ops], np.int32)
        kinds = np.array(self.block_kinds, np.int32)
        if granularity == "op":
            block, block_kind = np.arange(n, dtype=np.int32), kinds[op_block]
        else:
            # drop empty blocks and renumber
            used = np.unique(op_block)
            remap = np.full(len(kinds), -1, np.int32)
            remap[used] = np.arange(len(used))
            block, block_kind = remap[op_block], kinds[used]
        return LayerGraph.create(
            op_class=[o["cls"] for o in self.ops],
            block=block,
            block_kind=block_kind,
            flops=[o["flops"] for o in self.ops],
            act_bytes=[o["act"] for o in self.ops],
            param_bytes=[o["params"] for o in self.ops],
            out_bytes=[o["out"] for o in self.ops],
            preds=preds,
        )


def _layers(cfg: TransformerConfig, s: int) -> GraphBuilder:
    """All ops of `cfg` at s tokens per sample, grouped into EMBEDDING/ATTENTION/FFN/OTHER."""
    g = GraphBuilder()
    d, h, f, t = cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dtype_bytes
    kv = cfg.kv_heads * cfg.head_dim
    bias = cfg.arch != "llama"

    def linear(name, x, d_in, d_out, tokens=s):
        w = d_in * d_out + (d_out if bias else 0)
        return g.op(
            name, MATMUL, 2 * tokens * d_in * d_out, t * tokens * (d_in + d_out),
            t * tokens * d_out, t * w, [x],
        )  # fmt: skip

    def norm(name, x, width=d, tokens=s):
        rms = cfg.arch == "llama"
        return g.op(
            name, NORM, (6 if rms else 8) * tokens * width, 2 * t * tokens * width,
            t * tokens * width, t * width * (1 if rms else 2), [x],
        )  # fmt: skip

    def add(name, a, b, width=d):
        return g.op(name, ELEMWISE, s * width, 3 * t * s * width, t * s * width, 0, [a, b])

    def gather(name, rows, width, preds=(), charge_table=True):
        return g.op(
            name, EMBED, s * width, t * s * (2 * width + 1), t * s * width,
            t * rows * width if charge_table else 0.0, preds,
        )  # fmt: skip

    def attention(x):
        """Q, K, V projections, scores, softmax, context, output projection -> (out, v)."""
        if cfg.fused_qkv:  # GPT-2's c_attn: one GEMM whose output holds Q, K and V
            q = k = v = linear("qkv_proj", x, d, d + 2 * kv)
        else:
            q = linear("q_proj", x, d, d)
            k = linear("k_proj", x, d, kv)
            v = linear("v_proj", x, d, kv)
        if cfg.arch == "llama":
            q = g.op("rope_q", ELEMWISE, 3 * s * d, 2 * t * s * d, t * s * d, 0, [q])
            k = g.op("rope_k", ELEMWISE, 3 * s * kv, 2 * t * s * kv, t * s * kv, 0, [k])
        scores = g.op(
            "qk_matmul", ATTN, 2 * s * s * d, t * (s * d + s * kv + h * s * s), t * h * s * s,
            0, [q, k],
        )  # fmt: skip
        scaled = g.op("scale_mask", ELEMWISE, h * s * s, 2 * t * h * s * s, t * h * s * s, 0,
                      [scores])  # fmt: skip
        probs = g.op("softmax", NORM, 5 * h * s * s, 2 * t * h * s * s, t * h * s * s, 0, [scaled])
        ctx = g.op(
            "pv_matmul", ATTN, 2 * s * s * d, t * (h * s * s + s * kv + s * d), t * s * d, 0,
            [probs, v],
        )  # fmt: skip
        return linear("o_proj", ctx, d, d)

    def mlp(x):
        if cfg.arch == "llama":
            gate = linear("gate_proj", x, d, f)
            up = linear("up_proj", x, d, f)
            act = g.op("silu", ELEMWISE, 5 * s * f, 2 * t * s * f, t * s * f, 0, [gate])
            prod = g.op("mul", ELEMWISE, s * f, 3 * t * s * f, t * s * f, 0, [act, up])
            return linear("down_proj", prod, f, d)
        up = linear("fc1", x, d, f)
        act = g.op("gelu", ELEMWISE, 8 * s * f, 2 * t * s * f, t * s * f, 0, [up])
        return linear("fc2", act, f, d)

    # --- embedding ---------------------------------------------------------------------------
    if cfg.arch == "vit":
        g.begin_block(OTHER, "patch_embed")
        n_patch = s - 1
        patch_in = cfg.channels * cfg.patch_size**2
        patches = g.op(
            "patch_conv", MATMUL, 2 * n_patch * patch_in * d, t * n_patch * (patch_in + d),
            t * n_patch * d, t * (patch_in * d + d),
        )  # fmt: skip
        tokens = g.op("concat_cls", CONTROL, s * d, 2 * t * s * d, t * s * d, t * d, [patches])
        x = g.op("add_pos", ELEMWISE, s * d, 3 * t * s * d, t * s * d, t * s * d, [tokens])
    else:
        g.begin_block(EMBEDDING, "embedding")
        tied = cfg.tied_lm_head
        if cfg.arch == "llama":
            x = gather("tok_embed", cfg.vocab_size, d)
        else:
            pos_ids = g.op("position_ids", CONTROL, s, 2 * 8 * s, 8 * s, 0)
            # A tied table is charged to the LM head, which streams all of it (see README).
            tok = gather("tok_embed", cfg.vocab_size, d, charge_table=not tied)
            pos = gather("pos_embed", cfg.max_positions, d, [pos_ids])
            x = add("add_pos", tok, pos)
            if cfg.arch == "bert":
                typ = gather("type_embed", cfg.type_vocab_size, d)
                x = add("add_type", x, typ)
                x = norm("embed_ln", x)

    # --- layers ------------------------------------------------------------------------------
    for layer in range(cfg.n_layers):
        if cfg.arch == "bert":  # post-LN
            g.begin_block(ATTENTION, f"layer{layer}.attention")
            o = attention(x)
            x = norm("attn_ln", add("attn_residual", o, x))
            g.begin_block(FFN, f"layer{layer}.ffn")
            x = norm("ffn_ln", add("ffn_residual", mlp(x), x))
        else:  # pre-norm
            g.begin_block(ATTENTION, f"layer{layer}.attention")
            x = add("attn_residual", attention(norm("attn_norm", x)), x)
            g.begin_block(FFN, f"layer{layer}.ffn")
            x = add("ffn_residual", mlp(norm("ffn_norm", x)), x)

    # --- head --------------------------------------------------------------------------------
    g.begin_block(OTHER, "head")
    if cfg.arch == "bert":
        cls_tok = g.op("slice_cls", CONTROL, d, t * (s * d + d), t * d, 0, [x])
        pooled = linear("pooler", cls_tok, d, d, tokens=1)
        g.op("pooler_tanh", ELEMWISE, 8 * d, 2 * t * d, t * d, 0, [pooled])
    elif cfg.arch == "vit":
        x = norm("final_ln", x)
        cls_tok = g.op("slice_cls", CONTROL, d, t * (s * d + d), t * d, 0, [x])
        linear("classifier", cls_tok, d, cfg.num_classes, tokens=1)
    else:
        x = norm("final_norm", x)
        v = cfg.vocab_size
        head_w = v * d  # no bias; a tied table is charged here, once
        g.op("lm_head", MATMUL, 2 * s * d * v, t * s * (d + v), t * s * v, t * head_w, [x])
    return g


def transformer(
    model: str | TransformerConfig,
    seq_len: int | None = None,
    granularity: str = "block",
    *,
    n_max: int | None = None,
    m_max: int | None = None,
    quality=None,
) -> LayerGraph:
    """The `LayerGraph` of a built-in (by name) or custom Transformer at `seq_len` tokens.

    granularity "block" groups ops into EMBEDDING / ATTENTION / FFN / OTHER blocks (bert-base:
    embedding, 12 attention, 12 FFN, head = 26 blocks); "op" makes every op its own block.
    Optional `n_max` / `m_max` pad the result. Quantities are per sample, fp16 by default.
    Cost model 2.0's quality losses (`fmt_loss`, `code_loss`, accuracy points) are spread from
    `quality` (a `hj.graphs.QualityLoss`; None: the published defaults of the model's
    architecture family, `hj.graphs.QUALITY`, docs/quality.md).
    """
    from hetjax.graphs.quality import QualityLoss, default_losses, spread

    cfg = config(model)
    if quality is None:
        quality = default_losses(cfg.arch)
    if not isinstance(quality, QualityLoss):
        raise GraphError(f"transformer: quality = {quality!r}: expected a QualityLoss or None")
    g = spread(_layers(cfg, cfg.tokens(seq_len)).build(granularity, p_max=2), quality)
    if n_max is not None or m_max is not None:
        from hetjax.graphs.core import pad

        g = pad(g, g.n_max if n_max is None else n_max, g.m_max if m_max is None else m_max)
    return g


def param_count(model: str | TransformerConfig) -> float:
    """Number of weights of a model (sum of param_bytes / dtype_bytes)."""
    cfg = config(model)
    g = _layers(cfg, cfg.tokens(None))
    return sum(o["params"] for o in g.ops) / cfg.dtype_bytes


def op_names(model: str | TransformerConfig, seq_len: int | None = None) -> list[str]:
    """Op names in index order (for tables and plots)."""
    cfg = config(model)
    return _layers(cfg, cfg.tokens(seq_len)).op_names


def block_names(model: str | TransformerConfig) -> list[str]:
    """Block names in index order at block granularity."""
    cfg = config(model)
    return _layers(cfg, cfg.tokens(None)).block_names
