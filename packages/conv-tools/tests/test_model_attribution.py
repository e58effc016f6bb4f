"""The per-layer attribution of the real-model benchmark, on the CPU: every convolution found with its forward
and backward, the other ops by name, the picks and routes joined in."""

import torch
from torch import nn

from conv_tools import bench_models
from conv_tools.model_attribution import (attribute_mode, convolution_modules, describe, layer_ranges,
                                         profile_steps, worst_layers)
from conv_tools.model_bench import ModelBenchConfig, model_picks
from conv_core.testing.fakes import isolate

CPU = torch.device("cpu")
TINY_CONVOLUTIONS = ("stem.0", "body.0.0", "body.1.0", "head")


def _tiny():
    config = ModelBenchConfig(model="tiny", device="cpu", dtype="float32")
    return config, bench_models.build("tiny"), bench_models.get("tiny").example(2, CPU)


def test_every_convolution_module_is_found_and_its_ranges_leave(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)
    _, model, x = _tiny()
    assert [name for name, _ in convolution_modules(model)] == list(TINY_CONVOLUTIONS)
    layouts = {}
    with layer_ranges(model, layouts):
        model(x.to(memory_format=torch.channels_last))
    assert set(layouts) == set(TINY_CONVOLUTIONS)
    assert all(layouts[name] == ("channels_last", "channels_last") for name in TINY_CONVOLUTIONS)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_training_attributes_each_backward_to_its_layer(tmp_path, monkeypatch):
    """A backward node is its layer's (sequence numbers), not an anonymous op of the rest."""
    isolate(tmp_path, monkeypatch)
    _, model, x = _tiny()
    model.train()

    def step():
        model(x).square().mean().backward()

    split, _ = profile_steps(step, model, CPU, warmup=1, steps=2)
    assert set(split["layers"]) == set(TINY_CONVOLUTIONS)
    for name, row in split["layers"].items():
        assert row["fwd_host_us"] > 0 and row["bwd_host_us"] > 0, name
        assert row["calls"] == 1
    assert not any("Convolution" in op for op in split["outside"]), split["outside"].keys()
    assert "aten::batch_norm" in split["outside"] and "NativeBatchNormBackward0" in split["outside"]


def test_a_mode_joins_plain_converted_picks_and_routes(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)
    config, base, x = _tiny()
    picks = model_picks(base, x, config)["conv"]
    for mode in ("eager", "train"):
        record = attribute_mode(mode, base, x, config, picks, steps=2)
        assert record["mode"] == mode and [r["module"] for r in record["layers"]] == list(TINY_CONVOLUTIONS)
        for row in record["layers"]:
            assert row["fwd"].startswith("aten:") and row["route"] == "direct"
            assert row["layout_conv"] == ["channels_last", "channels_last"] == row["layout_plain"]
            assert row["plain"]["fwd_host_us"] > 0 and row["conv"]["fwd_host_us"] > 0
            assert (row["conv"]["bwd_host_us"] > 0) == (mode == "train")
        assert {"plain", "conv"} <= set(record["totals"]) <= {"plain", "conv", "fused"}
        ops = {r["op"] for r in record["outside"]}
        assert "aten::batch_norm" in ops and "aten::add" in ops
        assert len(describe(record)) >= 2 and all(r["growth_us"] > 0 for r in worst_layers(record))


def test_a_transposed_convolution_is_a_layer_too(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)
    model = nn.Sequential(nn.ConvTranspose2d(4, 4, 2, 2), nn.ReLU())
    split, layouts = profile_steps(lambda: model(torch.randn(1, 4, 4, 4)), model, CPU, warmup=0, steps=1)
    assert set(split["layers"]) == {"0"} and layouts["0"] == ("channels_first", "channels_first")


def test_the_benchmark_attributes_on_request_and_the_page_shows_the_slower_modes(tmp_path, monkeypatch):
    from conv_tools.bench_page import render
    from conv_tools.model_attribution import attribute_model
    from conv_tools.model_bench import run_model_bench

    isolate(tmp_path, monkeypatch)
    config = ModelBenchConfig(model="tiny", device="cpu", dtype="float32", modes=("eager", "train"), rounds=1,
                              iterations=1, warmup=0, variants=("plain", "conv"))
    record = run_model_bench(config)
    record["attribution"] = attribute_model(config, record["picks"]["conv"])
    assert [a["mode"] for a in record["attribution"]] == ["eager", "train"]
    assert all("failed" not in a and a["layers"] for a in record["attribution"])
    for mode in record["modes"]:
        mode["ratios"]["conv"] = 0.5 if mode["mode"] == "train" else 1.5
    page = render([record])
    assert "## Where the slower models lose time" in page and "### tiny, train (0.500x)" in page
    assert "### tiny, eager" not in page and "convolutions, backward: host" in page


def test_the_cli_attributes_with_attribute(tmp_path, monkeypatch, capsys):
    import json

    from conv_core.cli import main

    isolate(tmp_path, monkeypatch)
    path = tmp_path / "tiny.json"
    assert main(["bench", "--model", "tiny", "--device", "cpu", "--dtype", "fp32", "--modes", "eager",
                 "--rounds", "1", "--iterations", "1", "--warmup", "0", "--attribute", "--json", str(path)]) == 0
    (attribution,) = json.loads(path.read_text())["attribution"]
    assert attribution["mode"] == "eager" and attribution["layers"]
    assert "tiny eager: where the time goes" in capsys.readouterr().err
