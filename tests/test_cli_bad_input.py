"""Every bad option of every command is refused up front: exit code 2, exactly one line on
stderr naming the option (or field) and the value, no traceback, and no file created or changed.

Table-driven: each case is (argv, words the error line must contain). Paths in the arguments
are relative to a scratch folder prepared by `scratch` (a regular file, a folder, broken
platform files, a broken run directory); the test runs in that folder and compares its whole
tree before and after.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hetjax import cli

LONG = "x" * 300

CASES = [
    # evaluate
    (["evaluate", "--model", "bert-huge"], ["--model", "bert-huge"]),
    (["evaluate", "--model", "missing.onnx"], ["--model", "missing.onnx"]),
    (["evaluate", "--model", "adir"], ["--model", "adir", "directory"]),
    (["evaluate", "--model", "afile"], ["--model", "afile"]),
    (["evaluate", "--model", "garbage.onnx"], ["--model", "garbage.onnx"]),
    (["evaluate", "--model", f"{LONG}.onnx"], ["--model", "too long"]),
    (["evaluate", "--platform", "moon"], ["--platform", "moon"]),
    (["evaluate", "--platform", "adir"], ["--platform", "adir", "directory"]),
    (["evaluate", "--platform", "str.json"], ["--platform", "str.json"]),
    (["evaluate", "--platform", "short.json"], ["--platform", "short.json", "mem_bw"]),
    (["evaluate", "--platform", "neg.json"], ["--platform", "neg.json", "link_bw"]),
    (["evaluate", "--platform", "broken.json"], ["--platform", "broken.json"]),
    (["evaluate", "--platform", "[bold]x[/bold].json"], ["--platform", "[bold]x[/bold].json"]),
    (["evaluate", "--platform", f"{LONG}.json"], ["--platform", "too long"]),
    (["evaluate", "--placement", "all-7"], ["--placement", "all-7"]),
    (["evaluate", "--placement", "diagonal"], ["--placement", "diagonal"]),
    (["evaluate", "--batch", "0"], ["--batch", "0"]),
    (["evaluate", "--batch", "-2"], ["--batch", "-2"]),
    (["evaluate", "--batch", "nan"], ["--batch", "nan"]),
    (["evaluate", "--batch", "inf"], ["--batch", "inf"]),
    (["evaluate", "--batch", "abc"], ["--batch", "abc"]),
    (["evaluate", "--seq-len", "0"], ["--seq-len", "0"]),
    (["evaluate", "--seq-len", "-5"], ["--seq-len", "-5"]),
    (["evaluate", "--seq-len", "1.5"], ["--seq-len", "1.5"]),
    (["evaluate", "--model", "bert-base", "--seq-len", "100000"], ["seq_len", "100000"]),
    (["evaluate", "--granularity", "layer"], ["--granularity", "layer"]),
    (["evaluate", "--dim", "sequence"], ["--dim", "sequence"]),
    (["evaluate", "--dim", "sequence=abc"], ["--dim", "sequence=abc"]),
    (["evaluate", "--dim", "sequence=0"], ["--dim", "sequence=0"]),
    (["evaluate", "--model", "bert-tiny", "--dim", "sequence=8"], ["dims", "bert-tiny"]),
    (["evaluate", "--no-such-option"], ["--no-such-option"]),
    (["frobnicate"], ["frobnicate"]),
    # compare
    (["compare", "--samples", "-1"], ["--samples", "-1"]),
    (["compare", "--samples", "many"], ["--samples", "many"]),
    (["compare", "--seed", "-1"], ["--seed", "-1"]),
    (["compare", "--platform", "hot.json"], ["--platform", "hot.json", "p_idle"]),
    (["compare", "--out", "afile"], ["--out", "afile"]),
    (["compare", "--out", "afile/sub"], ["--out", "afile/sub"]),
    (["compare", "--model", "bert-huge"], ["--model", "bert-huge"]),
    (["compare", "--platform", "neg.json"], ["--platform", "neg.json"]),
    (["compare", "--seq-len", "0"], ["--seq-len", "0"]),
    (["compare", "--quality-budget", "1"], ["--quality-budget", "1.0", "--formats"]),
    (["compare", "--delta", "0.1"], ["--delta", "0.1", "--compression"]),
    (["compare", "--formats", "--quality-budget", "-1"], ["--quality-budget", "-1.0"]),
    (["compare", "--formats", "--time-limit", "0"], ["--time-limit", "0.0"]),
    (["compare", "--formats", "--time-limit", "nan"], ["--time-limit", "nan"]),
    # train
    (["train", "--num-envs", "0"], ["--num-envs", "0"]),
    (["train", "--granularity", "layer"], ["--granularity", "layer"]),
    (["train", "--granularity", "op"], ["--teacher", "exact", "--granularity op"]),
    (["train", "--num-envs", "-4"], ["--num-envs", "-4"]),
    (["train", "--num-envs", "6"], ["--num-envs", "6"]),
    (["train", "--num-updates", "-1"], ["--num-updates", "-1"]),
    (["train", "--chunk", "0"], ["--chunk", "0"]),
    (["train", "--held-out", "0"], ["--held-out", "0"]),
    (["train", "--imitation-steps", "-1"], ["--imitation-steps", "-1"]),
    (["train", "--imitation-platforms", "0"], ["--imitation-platforms", "0"]),
    (["train", "--imitation-ties", "random"], ["--imitation-ties", "random"]),
    (["train", "--epsilon", "1"], ["--epsilon", "1"]),
    (["train", "--epsilon", "-0.1"], ["--epsilon", "-0.1"]),
    (["train", "--batch-epsilon", "1"], ["--batch-epsilon", "1"]),
    (["train", "--bc-coef", "-1"], ["--bc-coef", "-1"]),
    (["train", "--dagger-rounds", "-2"], ["--dagger-rounds", "-2"]),
    (["train", "--advantage", "td"], ["--advantage", "td"]),
    (["train", "--encoder", "lstm"], ["--encoder", "lstm"]),
    (["train", "--descriptors", "raw"], ["--descriptors", "raw"]),
    (["train", "--reference", "optimum"], ["--reference", "optimum"]),
    (["train", "--teacher", "none", "--num-updates", "0"], ["num_updates = 0"]),
    (["train", "--teacher", "oracle"], ["--teacher", "oracle"]),
    (["train", "--teacher", "cem", "--teacher-size", "population=0"], ["--teacher-size", ">= 1"]),
    (["train", "--teacher", "cem", "--teacher-size", "pop=5"], ["--teacher-size", "'pop'"]),
    (["train", "--teacher", "cem", "--teacher-size", "k"], ["--teacher-size", "NAME=VALUE"]),
    (["train", "--teacher-size", "population=768"], ["--teacher-size", "'exact' has no sizes"]),
    (
        [
            "train",
            "--teacher",
            "cem",
            "--teacher-size",
            "population=8",
            "--teacher-size",
            "population=9",
        ],
        ["--teacher-size", "at most once"],
    ),
    (["train", "--teacher", "none", "--imitation-steps", "5"], ["--imitation-steps", "5"]),
    (["train", "--teacher", "none", "--bc-coef", "0.5"], ["bc_coef", "0.5"]),
    (["train", "--quality-budget", "1"], ["--quality-budget", "1", "--formats"]),
    (["train", "--delta", "0.5"], ["--delta", "0.5", "--formats"]),
    (["train", "--formats", "--quality-budget", "-1"], ["--quality-budget", "-1"]),
    (["train", "--formats", "--teacher", "none", "--delta", "nan"], ["--delta", "nan"]),
    (["train", "--formats"], ["--teacher", "exact", "none"]),
    (["train", "--best-of", "-1"], ["--best-of", "-1"]),
    (["train", "--teacher", "none", "--batch-fit", "-1"], ["--batch-fit", "-1"]),
    (["train", "--seed", "-1"], ["--seed", "-1"]),
    (["train", "--baselines", "cem,oracle"], ["--baselines", "oracle"]),
    (["train", "--baselines", "cem,cem"], ["--baselines", "cem,cem"]),
    (["train", "--seq-len", "0"], ["--seq-len", "0"]),
    (["train", "--platform", "moon"], ["--platform", "moon"]),
    (["train", "--platform", "adir"], ["--platform", "adir"]),
    # platform files: validated before any work, named by their option
    (["train", "--platform", "neg.json"], ["--platform", "neg.json", "link_bw"]),
    (["train", "--platform", "broken.json"], ["--platform", "broken.json"]),
    (["train", "--platforms", "edge.json,short.json"], ["--platforms", "short.json", "mem_bw"]),
    (["train", "--platforms", "host4.json"], ["--platforms", "host4.json", "--d-max 3"]),
    (
        ["train", "--zero-shot-models", "gpt2", "--zero-shot-platforms", "str.json"],
        ["--zero-shot-platforms", "str.json"],
    ),
    (["train", "--model", "bert-huge"], ["--model", "bert-huge"]),
    (["train", "--models", "gpt2,nope"], ["--models", "nope"]),
    (["train", "--platforms", "datacenter,nope"], ["--platforms", "nope"]),
    (["train", "--platforms", "edge"], ["platforms", "edge"]),
    (["train", "--d-max", "0"], ["--d-max", "0"]),
    (["train", "--correction", "-1"], ["--correction", "-1"]),
    (["train", "--correction", "1", "--rollout"], ["--correction 1.0", "--encoder device"]),
    (["train", "--platforms", "datacenter,host4"], ["--platforms", "host4", "--d-max 3"]),
    (["train", "--platform", "datacenter4", "--d-max", "2"], ["--platform", "datacenter4"]),
    (["train", "--zero-shot-models", "vit-b16"], ["--zero-shot-models", "vit-b16"]),
    (
        ["train", "--zero-shot-models", "nope", "--zero-shot-platforms", "soc"],
        ["--zero-shot-models", "nope"],
    ),
    (
        ["train", "--zero-shot-models", "gpt2", "--zero-shot-platforms", "mars"],
        ["--zero-shot-platforms", "mars"],
    ),
    (
        [
            "train",
            "--zero-shot-models",
            "gpt2",
            "--zero-shot-platforms",
            "soc",
            "--zero-shot-n",
            "0",
        ],
        ["--zero-shot-n", "0"],
    ),
    (["train", "--models", "bert-base"], ["models", "bert-base"]),
    (["train", "--out", "afile"], ["--out", "afile"]),
    (["train", "--out", "afile/run"], ["--out", "afile/run"]),
    (["train", "--out", "badcfg", "--resume"], ["--out", "badcfg", "config.json"]),
    (["train", "--out", "badnpz", "--resume"], ["--out", "badnpz", "teacher.npz"]),
    (["train", "--out", "badmsgpack", "--resume"], ["--out", "badmsgpack", "checkpoint"]),
    (["train", "--out", "oldfield", "--resume"], ["--out", "oldfield", "unknown field"]),
    # place
    (["place", "--checkpoint", "adir"], ["--checkpoint", "adir", "config.json"]),
    (["place", "--checkpoint", "nowhere"], ["--checkpoint", "nowhere"]),
    (["place", "--checkpoint", "badcfg"], ["--checkpoint", "badcfg"]),
    (["place", "--checkpoint", "adir", "--best-of", "-1"], ["--best-of", "-1"]),
    (["place", "--checkpoint", "adir", "--seed", "-1"], ["--seed", "-1"]),
    (["place", "--checkpoint", "adir", "--platform", "moon"], ["--platform", "moon"]),
    (["place"], ["--checkpoint"]),
    # calibrate / fidelity
    (["calibrate", "missing.onnx"], ["missing.onnx"]),
    (["calibrate", "adir"], ["adir", "directory"]),
    (["calibrate", "garbage.onnx"], ["garbage.onnx"]),
    (["calibrate", "bert-tiny", "--repeats", "0"], ["--repeats", "0"]),
    (["calibrate", "bert-tiny", "--warmup", "-1"], ["--warmup", "-1"]),
    (["calibrate", "bert-tiny", "--threads", "0"], ["--threads", "0"]),
    (["calibrate", "bert-tiny", "--steps", "0"], ["--steps", "0"]),
    (["calibrate", "bert-tiny", "--lr", "0"], ["--lr", "0"]),
    (["calibrate", "bert-tiny", "--lr", "nan"], ["--lr", "nan"]),
    (["calibrate", "bert-tiny", "--batch", "0"], ["--batch", "0"]),
    (["calibrate", "bert-tiny", "--seq", "0"], ["--seq", "0"]),
    (["calibrate", "bert-tiny", "--dim", "past"], ["--dim", "past"]),
    (["calibrate", "bert-tiny", "--p-busy", "-3"], ["--p-busy", "-3"]),
    (["calibrate", "bert-tiny", "--p-busy", "5", "--p-idle", "9"], ["--p-idle", "9"]),
    (["calibrate", "bert-tiny", "--out", "adir"], ["--out", "adir"]),
    (["calibrate", "bert-tiny", "--out", "afile/p.json"], ["--out", "afile/p.json"]),
    (["calibrate", "bert-tiny", "--e2e-weight", "-1"], ["--e2e-weight", "-1"]),
    (["fidelity", "--fit", "bert-mini", "--test", "bert-mini"], ["--fit", "--test", "bert-mini"]),
    (["fidelity", "--test", "missing.onnx"], ["--test", "missing.onnx"]),
    (["fidelity", "--fit", "nope.onnx"], ["--fit", "nope.onnx"]),
    (["fidelity", "--seq", "0"], ["--seq", "0"]),
    (["fidelity", "--fit-seq", "-1"], ["--fit-seq", "-1"]),
    (["fidelity", "--repeats", "0"], ["--repeats", "0"]),
    (["fidelity", "--out", "adir"], ["--out", "adir"]),
    (["fidelity", "--platform-out", "afile/x.json"], ["--platform-out", "afile/x.json"]),
    (["fidelity", "--dim", "sequnce=8"], ["--dim", "sequnce=8", "no model"]),
    (["fidelity", "--fit", "relu.onnx", "--dim", "past=2"], ["--dim", "past=2", "rows"]),
    (["calibrate", "relu.onnx", "--dim", "sequnce=8"], ["--dim", "sequnce=8", "rows"]),
    (["calibrate", "bert-tiny", "bert-tiny"], ["MODELS", "'bert-tiny'", "twice"]),
    (["calibrate", "relu.onnx", "./relu.onnx"], ["MODELS", "'./relu.onnx'", "twice"]),
    (["calibrate", "bert-nano"], ["MODELS", "'bert-nano'", "not a built-in model"]),
    (["calibrate", "bert-tiny", "--seq", "600"], ["--seq 600", "512 positions"]),
    (["calibrate", "bert-tiny", "--dim", "batch=4"], ["--dim batch=4", "--batch"]),
    # a built-in name (or the probe's) is the model even beside a folder of that name
    (["calibrate", "bert-tiny", "--repeats", "0"], ["--repeats", "0"]),
    (["calibrate", "weight-probe", "--repeats", "0"], ["--repeats", "0"]),
    (["fidelity", "--dim", "sequence=32"], ["--dim sequence=32", "--seq"]),
    (["fidelity", "--fit", "relu.onnx", "--test", "./relu.onnx"], ["--fit", "--test", "relu"]),
    (["fidelity", "--test", "gpt2", "--seq", "2000"], ["--seq 2000", "gpt2", "1024"]),
    (["fidelity", "--out", "r.json", "--platform-out", "./r.json"], ["--platform-out", "--out"]),
    (["evaluate", "--model", "relu.onnx", "--dim", "sequnce=8"], ["--model", "sequnce"]),
    (
        ["train", "--model", "relu.onnx", "--dim", "rows=4", "--dim", "sequnce=8"],
        ["--dim", "sequnce=8", "relu.onnx"],
    ),
    # sensitivity
    (["sensitivity"], ["MODEL"]),
    (["sensitivity", "missing.onnx"], ["MODEL", "missing.onnx"]),
    (["sensitivity", "adir"], ["MODEL", "adir", "directory"]),
    (["sensitivity", "garbage.onnx"], ["MODEL", "garbage.onnx"]),
    (["sensitivity", "garbage.onnx", "--samples", "0"], ["--samples", "0"]),
    (["sensitivity", "garbage.onnx", "--seed", "-1"], ["--seed", "-1"]),
    (["sensitivity", "garbage.onnx", "--dim", "sequence"], ["--dim", "sequence"]),
    (["sensitivity", "garbage.onnx", "--out", "adir"], ["--out", "adir"]),
    # sweep
    (
        [
            "train",
            "--model",
            "bert-tiny",
            "--num-envs",
            "8",
            "--out",
            "chunked",
            "--resume",
            "--chunk",
            "2",
        ],
        ["config.json", "chunk (the run's 1, now 2)"],
    ),
    (["place", "--checkpoint", "narrow"], ["checkpoint.msgpack", "incompatible", "(8,"]),
    (["place", "--checkpoint", "nockpt"], ["--checkpoint", "nockpt", "no checkpoint yet"]),
    (["place", "--checkpoint", "onlyclone"], ["--checkpoint", "onlyclone", "onlyclone:imitation"]),
    (["place", "--checkpoint", "nockpt:imitation"], ["--checkpoint", "imitation.msgpack does not"]),
    (["train", "--model", "bert-tiny", "--dim", "sequence=64"], ["--dim", "built in"]),
    (["train", "--model", "bert-tiny", "--blocks", "("], ["--blocks", "built in"]),
    (["train", "--num-envs", "10"], ["--num-envs 10", "multiple of 4"]),
    (["train", "--model", "bert-tiny", "--models", "bert-tiny"], ["--models", "--model already"]),
    (["train", "--teacher", "none", "--imitation-steps", "50"], ["--imitation-steps 50", "none"]),
    (["sweep"], ["SWEEP.toml"]),
    (["sweep", "missing.toml"], ["missing.toml"]),
    (["sweep", "adir"], ["adir", "directory"]),
    (["sweep", "broken.toml"], ["broken.toml", "TOML"]),
    (["sweep", "ok.toml", "--workers", "0"], ["--workers", "0"]),
    (["sweep", "ok.toml", "--shard-size", "0"], ["--shard-size", "0"]),
    (["sweep", "ok.toml", "--address", "no address"], ["--address", "no address"]),
    (["sweep", "ok.toml", "--address", "localhost:1"], ["--address", "localhost:1", "cannot join"]),
    (["sweep", "ok.toml", "--out", "afile"], ["--out", "afile"]),
    (["sweep", "ok.toml", "--summary-by", "colour"], ["--summary-by", "colour", "model"]),
    (["sweep", "ok.toml", "--summary-by", "alpha"], ["--summary-by", "alpha"]),
    (["sweep", "ok.toml", "--out", "donesweep"], ["--out", "donesweep", "--resume"]),
    (["sweep", "unknown_model.toml"], ["models[0].name", "bert-huge"]),
    (["sweep", "bad_heads.toml"], ["models[0]", "no valid combination"]),
    (["sweep", "bad_field.toml"], ["overrides[0].field", "speed"]),
    (["sweep", "zero_bw.toml"], ["overrides[0].set", "0"]),
    (["sweep", "bad_weights.toml"], ["weights[0]", "0.5"]),
    (["sweep", "bad_method.toml"], ["methods", "telepathy"]),
    (["sweep", "bad_key.toml"], ["platforms[0].colour", "unknown key"]),
    (["sweep", "bad_platform.toml"], ["platforms[0].file", "neg.json", "link_bw"]),
    (["sweep", "bad_device.toml"], ["peak[5]_scale", "device = 5"]),
    (["sweep", "hot_idle.toml"], ["overrides[0] p_idle = 500", "p_busy", "exact"]),
    (["sweep", "tiny_memory.toml"], ["overrides[0] mem_capacity[0] = 1000", "reference plan"]),
]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A folder with the broken inputs the cases name."""
    import hetjax as hj

    d = tmp_path_factory.mktemp("bad")
    (d / "afile").write_text("not a folder\n")
    (d / "adir").mkdir()
    (d / "bert-tiny").mkdir()  # a run folder named after a model (the name still means it)
    (d / "garbage.onnx").write_bytes(b"\x08\x07 certainly not protobuf")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "rows", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    relu = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    (d / "relu.onnx").write_bytes(helper.make_model(relu).SerializeToString())
    hj.hardware.save(hj.hardware.preset("edge"), d / "edge.json")
    hj.hardware.save(hj.hardware.preset("host4"), d / "host4.json")
    good = json.loads((d / "edge.json").read_text())

    def variant(name, edit):
        doc = json.loads(json.dumps(good))
        edit(doc["fields"])
        (d / name).write_text(json.dumps(doc))

    variant("str.json", lambda f: f.__setitem__("launch", "fast"))
    variant("short.json", lambda f: f.__setitem__("mem_bw", f["mem_bw"][:1]))
    variant("neg.json", lambda f: f["link_bw"][0].__setitem__(1, -5.0))
    variant("hot.json", lambda f: f["p_idle"].__setitem__(1, f["p_busy"][1] + 1.0))
    (d / "broken.json").write_text("{not json")
    for name in ("badcfg", "badnpz", "badmsgpack", "oldfield"):
        (d / name).mkdir()
    (d / "badcfg" / "config.json").write_text("{ppo: nope")
    cfg = {"ppo": {"model": "bert-tiny", "num_envs": 8}, "chunk": 1, "validation": 4}
    for name in ("badnpz", "badmsgpack"):
        (d / name / "config.json").write_text(json.dumps(cfg))
    (d / "badnpz" / "teacher.npz").write_bytes(b"PK\x03\x04 truncated zip")
    (d / "badmsgpack" / "checkpoint.msgpack").write_bytes(b"\xc1\xc1\xc1")
    (d / "oldfield" / "config.json").write_text(
        json.dumps({"ppo": {"model": "bert-tiny", "warp_drive": 9}, "chunk": 1})
    )
    ok = (
        'methods = ["greedy_eft"]\n[[models]]\nname = "bert-tiny"\n[[platforms]]\npreset = "edge"\n'
    )
    tomls = {
        "ok.toml": ok,
        "broken.toml": "name = [unclosed\n",
        "unknown_model.toml": ok.replace('"bert-tiny"', '"bert-huge"'),
        "bad_heads.toml": ok.replace('name = "bert-tiny"', 'base = "bert-tiny"\nn_heads = [7]'),
        "bad_field.toml": ok + '[[overrides]]\nfield = "speed"\nset = [1]\n',
        "zero_bw.toml": ok + '[[overrides]]\nfield = "link_bw"\nset = [0]\n',
        "bad_weights.toml": "weights = [[0.5, 0.5]]\n" + ok,
        "bad_method.toml": ok.replace('"greedy_eft"', '"telepathy"'),
        "bad_key.toml": ok + 'colour = "red"\n',
        "bad_platform.toml": ok.replace('preset = "edge"', 'file = "neg.json"'),
        "bad_device.toml": ok + '[[overrides]]\nfield = "peak"\ndevice = 5\nscale = [2]\n',
        "hot_idle.toml": ok.replace('"greedy_eft"', '"greedy_eft", "exact"')
        + '[[overrides]]\nfield = "p_idle"\nset = [500]\n',
        "tiny_memory.toml": ok
        + '[[overrides]]\nfield = "mem_capacity"\ndevice = 0\nset = [1000]\n',
    }
    for name, text in tomls.items():
        (d / name).write_text(text)
    # a run whose checkpoint was written by a wider network than its config.json says, and a
    # run stopped before its first checkpoint
    import jax

    from hetjax.agents import ppo
    from hetjax.agents.trainer import save_checkpoint

    small = dict(model="bert-tiny", num_envs=8, num_minibatches=2, heads=2, layers=1)
    for name, width, saved in (("narrow", 8, 16), ("nockpt", 8, None), ("onlyclone", 16, None)):
        (d / name).mkdir()
        cfg = ppo.PPOConfig(**small, width=width)
        (d / name / "config.json").write_text(json.dumps({"ppo": cfg.to_dict()}))
        if saved is not None:
            setup = ppo.make_setup(ppo.PPOConfig(**small, width=saved))
            runner = jax.jit(lambda k, s=setup: ppo.init_runner(s, k))(jax.random.key(0))
            save_checkpoint(d / name / "checkpoint.msgpack", runner, {})
    # a run stopped after cloning: its clone only (the narrow run's width-16 parameters)
    (d / "onlyclone" / "imitation.msgpack").write_bytes(
        (d / "narrow" / "checkpoint.msgpack").read_bytes())  # fmt: skip
    (d / "chunked").mkdir()
    (d / "chunked" / "config.json").write_text(json.dumps(
        {"ppo": ppo.PPOConfig(model="bert-tiny", num_envs=8).to_dict(), "chunk": 1,
         "validation": 128}))  # fmt: skip
    (d / "donesweep").mkdir()
    (d / "donesweep" / "sweep.json").write_text("{}")
    return d


def _tree(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(argv, words, scratch, monkeypatch, capsys):
    monkeypatch.chdir(scratch)
    before = _tree(scratch)
    monkeypatch.setattr(sys, "argv", ["hetjax", *argv])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    assert exc.value.code == 2, (out.out, out.err)
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in out.err
    for w in words:
        assert w in line, (w, line)
    assert out.out == ""
    assert _tree(scratch) == before  # nothing created or changed
    assert not os.path.exists(scratch / "runs")


def test_at_least_80_cases():
    assert len(CASES) >= 80
