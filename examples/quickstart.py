import jax

import hetjax as hj

g = hj.graphs.transformer("bert-base", seq_len=128)  # 26 blocks: embedding, 12 x (attn, FFN), head
p = hj.hardware.preset("edge")  # T4-class GPU (device 0) + Ascend 310P-class NPU, PCIe 4.0 x16
ref = hj.evaluate(g, p, hj.reference_plan(g))  # every op on the GPU at batch 1
heavy = (g.block_kind == hj.graphs.ATTENTION) | (g.block_kind == hj.graphs.FFN)
plan = hj.Plan.from_blocks(g, heavy.astype(int), batch=8.0)  # attention/FFN on the NPU
m = hj.evaluate(g, p, plan)
print(f"latency {m.latency * 1e3:.2f} ms, throughput {m.throughput:.0f}/s")
print(f"score {hj.score(m, ref):.3f} (reference plan: 0.8)")
blocks = jax.random.randint(jax.random.key(0), (4096, g.m_max), 0, 2)  # 4096 random plans...
scores = hj.score(hj.evaluate(g, p, hj.Plan.from_blocks(g, blocks, 8.0)), ref)  # ...one call
print(f"best of 4096 random plans: {scores.max():.3f}")
