"""The real-model page, rendered from records made up here: targets judged, sections present, commands listed."""

import json

import pytest

from conv_tools.bench_page import TARGETS, Runs, Target, render
from conv_core.cli import main

ENV = {"devices": [{"device": "cpu", "name": "x86"}, {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3"}],
       "versions": {"torch": "2.11.0", "triton": "3.6.0", "cudnn": 91900, "conv-core": "0.1.0"}}


def mode(name, plain_ms, conv_ms, *, error=0.01, conv_error=0.012, within=True, skipped=None, spread=None):
    if skipped:
        return {"mode": name, "skipped": skipped, "variants": {}, "ratios": {}, "within_tolerance": {}}
    return {"mode": name, "skipped": None, "tolerated_error": 0.02,
            "variants": {"plain": {"ms": plain_ms, "first_s": 1.0, "error": error, "notes": [], "failed": None},
                         "conv": {"ms": conv_ms, "first_s": 2.0, "error": conv_error, "notes": ["a note"],
                                  "failed": None}},
            "ratios": {"conv": plain_ms / conv_ms}, "within_tolerance": {"plain": True, "conv": within},
            **({"ratio_spread": {"conv": spread}, "rounds": 5, "iterations": 4} if spread else {})}


def model_record(model, modes, date="2026-11-25T10:00:00+00:00", command=None, config=None):
    picks = {"conv": {"by_backend": {"fwd": {"aten": {"problems": 3, "calls": 5}, "gluon": {"problems": 2,
                                                                                            "calls": 2}}}}}
    return {"kind": "model", "model": model, "batch": 32, "config": config or {"reps": 20, "warmup": 3}, "modes": modes,
            "picks": picks, "fused_available": False, "date": date, "environment": ENV,
            "backends": {"aten": "0.1.0", "gluon": "0.1.0"}, "command": command or f"conv-core bench --model {model}"}


def records():
    return [
        model_record("resnet50", [mode("eager", 10.0, 8.0), mode("train", 30.0, 40.0), mode("graph", 3.0, 2.0)]),
        model_record("convnext_tiny", [mode("eager", 10.0, 12.5, within=False), mode("graph", 0, 0, skipped="x")]),
        {"kind": "ddp", "model": "resnet50", "world_size": 2, "batch_per_rank": 32, "ms": {"plain": 50.0, "conv": 40.0},
         "ratio": 1.25, "parameters_equal_across_ranks": {"plain": True, "conv": True}, "date": "2026-11-25T11:00:00",
         "command": "python3 -m torch.distributed.run --nproc_per_node 2 -m conv_tools.model_bench_ddp"},
        {"kind": "host", "device": "cuda", "dtype": "bfloat16", "layer": "n2 c64 k64 i8x8 f3x3 s1 p1", "calls": 100,
         "rounds": 20, "command": "conv-core bench --host",
         "rows": [{"layout": "channels_last", "what": "fwd", "label": "torch", "backend": None, "kernel": None,
                   "host_us": 15.0, "wall_us": 16.0, "ratio": 1.0, "skipped": None, "failed": None},
                  {"layout": "channels_last", "what": "fwd", "label": "conv_core[aten]", "backend": "aten",
                   "kernel": "aten:native:default", "host_us": 18.0, "wall_us": 19.0, "ratio": 1.2, "skipped": None,
                   "failed": None},
                  {"layout": "channels_last", "what": "fwd", "label": "conv_core[gluon]", "backend": "gluon",
                   "kernel": "gluon:k:c", "host_us": 12.0, "wall_us": 19.0, "ratio": 0.8, "skipped": None,
                   "failed": None}]},
    ]


def verdicts(runs):
    return {t.what: t.verdict(t.measure(runs)[0]) for t in TARGETS}


def test_targets_are_judged_from_the_records():
    got = verdicts(Runs(records()))
    assert got["eager inference: geomean over the models"] == "missed by 4.8%"  # sqrt(1.25 * 0.8) = 1.0
    assert got["eager inference: slowest model"] == "missed by 18.4%"  # 0.8 vs 0.98
    assert got["training step (bf16): geomean over the models"] == "missed by 28.6%"  # 0.75
    assert got["CUDA graph inference: geomean"] == "met"  # 1.5, the skipped model is not counted
    assert got["torch.compile: geomean"] == "not measured"
    assert got["DDP training step (AMP bf16)"] == "met"
    assert got["outputs within tolerance of float64 (share)"] == "missed by 25.0%"  # 3 of 4 conv outputs
    assert got["host time per call through aten, x PyTorch's (worst)"] == "missed by 9.1%"  # 1.2 vs at most 1.1
    assert got["host time per forward through a plugin, x PyTorch's (worst)"] == "met"
    assert got["host time per forward + backward through a plugin, x PyTorch's (worst)"] == "not measured"
    assert got["fused inference against unfused converted: slowest model"] == "not measured"
    assert got["ranking on held-out layers: worst layer"] == "not measured"


def test_geomeans_are_judged_on_the_issues_models_and_the_bar_on_every_model():
    tiny = model_record("tiny", [mode("eager", 1.0, 10.0)])
    got = {t.what: t.measure(Runs([*records(), tiny])) for t in TARGETS}
    assert got["eager inference: geomean over the models"] == (pytest.approx(1.0), "2 of the 6 models")
    assert got["eager inference: slowest model"] == (0.1, "tiny, of 3 models")
    alone = {t.what: t.measure(Runs([tiny])) for t in TARGETS}
    assert alone["eager inference: geomean over the models"] == (pytest.approx(0.1), "1 of the 6 models")


def test_fusion_is_judged_against_the_unfused_converted_model():
    def fused(name, plain_ms, conv_ms, fused_ms):
        entry = mode(name, plain_ms, conv_ms)
        entry["variants"]["fused"] = {**entry["variants"]["conv"], "ms": fused_ms}
        entry["ratios"]["fused"] = plain_ms / fused_ms
        return entry

    runs = Runs([model_record("resnet50", [fused("eager", 10.0, 8.0, 5.0)]),
                 model_record("convnext_tiny", [fused("eager", 10.0, 10.0, 12.5)])])
    got = {t.what: t.measure(runs) for t in TARGETS}
    assert got["fused inference (`fuse=True`): geomean"] == (pytest.approx(1.2649, rel=1e-3), "2 of the 6 models")
    assert got["fused inference against unfused converted: slowest model"] == (pytest.approx(0.8),
                                                                              "convnext_tiny, of 2 models")


def test_new_kind_models_get_their_own_geomean_beside_the_headline_ones():
    """A video, a transposed-convolution and a grouped model are reported beside the headline set, not in it."""
    from conv_tools.bench_page import ratios_section

    new = [model_record("r2plus1d_18", [mode("eager", 10.0, 5.0)]),
           model_record("transposed_decoder", [mode("eager", 10.0, 20.0)])]
    runs = Runs([*records(), *new])
    text = "\n".join(ratios_section(runs, "conv", "## conv"))
    assert "| geomean, headline models (resnet50, convnext_tiny) | 1.000x |" in text
    assert "| geomean, new kinds (r2plus1d_18, transposed_decoder) | 1.000x |" in text
    got = {t.what: t.measure(runs) for t in TARGETS}
    assert got["eager inference: geomean over the models"] == (pytest.approx(1.0), "2 of the 6 models")


def test_a_later_run_of_a_model_replaces_its_modes():
    later = model_record("resnet50", [mode("eager", 10.0, 5.0)], date="2026-11-26T10:00:00+00:00")
    runs = Runs([*records(), later])
    assert runs.ratios("eager") == {"resnet50": 2.0, "convnext_tiny": 0.8}
    assert runs.ratios("train") == {"resnet50": 0.75}  # kept from the earlier run


def test_what_limits_an_eager_mode_is_read_from_its_graph_mode():
    slower = model_record("mobilenet_v3_large", [mode("eager", 5.0, 7.0), mode("graph", 3.0, 3.5)])
    page = render([*records(), slower])
    assert "| resnet50 | eager | 3 | 2 | 7 | 6 | conv-core ahead on both |" in page
    assert "| mobilenet_v3_large | eager | 3 | 3.5 | 2 | 3.5 | host (+1.5 ms) |" in page
    assert "convnext_tiny | eager" not in page.split("## What limits")[1].split("##")[0]  # its graph was skipped


def test_a_run_cut_short_is_noted():
    partial = {**model_record("efficientnet_b0", [mode("eager", 2.0, 1.0)]), "complete": False}
    page = render([*records(), partial])
    assert "- cut short (a time limit?) before it finished, so parts are missing: " \
           "`conv-core bench --model efficientnet_b0`" in page
    assert "cut short" not in render(records())


def test_target_verdicts():
    at_least, at_most = Target("a", lambda runs: (None, ""), 1.05), Target("b", lambda runs: (None, ""), 1.1, False)
    assert at_least.verdict(1.05) == "met" and at_least.verdict(0.945) == "missed by 10.0%"
    assert at_most.verdict(1.0) == "met" and at_most.verdict(1.21) == "missed by 10.0%"
    assert at_least.verdict(None) == "not measured"


def test_the_page_has_every_section():
    page = render(records())
    for heading in ("# Real models", "## Targets (issue 31)", "## Time ratio per model and mode (converted model)",
                    "## Times", "## Output error against float64", "## Picks per backend", "## Notes", "## DDP",
                    "## Host time per call", "## Commands"):
        assert heading in page, heading
    assert "NVIDIA H100 80GB HBM3" in page and "torch 2.11.0" in page and "cudnn 91900" in page
    assert "| resnet50 | 1.250x | 0.750x | 1.500x |" in page
    assert "| **geomean** | **1.000x** |" in page
    assert "| resnet50 | aten 3/5, gluon 2/2 |" in page
    assert "conv-core bench --model resnet50\nconv-core bench --model convnext_tiny" in page
    assert "- resnet50 eager conv: a note" in page and "no `fused` variant" in page
    assert "## Ranking on held-out layers" not in page  # no holdout record given
    assert render(records(), "Other models").startswith("# Other models\n")


def test_the_cli_writes_the_page_and_refuses_other_files(capsys, tmp_path):
    paths = []
    for i, record in enumerate(records()):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(record))
    out = tmp_path / "real-models.md"
    assert main(["bench", "--report", *map(str, paths), "--out", str(out)]) == 0
    assert out.read_text() == render(records())
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    assert main(["bench", "--report", str(tmp_path / "other.json")]) == 2
    assert "not a benchmark record" in capsys.readouterr().err
    assert main(["bench", "--report", str(tmp_path / "missing.json")]) == 2


def test_a_ratio_timed_in_rounds_shows_its_spread_beside_older_records_without():
    rounds = model_record("mobilenet_v3_large", [mode("eager", 9.0, 10.0, spread=[0.87, 0.93])],
                          config={"rounds": 5, "iterations": 4, "warmup": 3})
    ddp = {"kind": "ddp", "model": "resnet50", "world_size": 4, "batch_per_rank": 32,
           "ms": {"plain": 50.0, "conv": 40.0}, "ratio": 1.25, "ratio_spread": [1.2, 1.31],
           "parameters_equal_across_ranks": {"plain": True, "conv": True}, "rounds": 5, "iterations": 4,
           "command": "ddp"}
    page = render([*records(), rounds, ddp])
    assert "| mobilenet_v3_large | 0.900x (0.87-0.93) |" in page
    assert "| resnet50 | 1.250x | 0.750x | 1.500x |" in page  # an older record: just the ratio
    assert "3 warm-up iterations, then 5 rounds of 4 iterations per variant" in page
    assert "median of 20 iterations after 3 warm-up ones" in page  # the older record's method, still said
    assert "In brackets beside a ratio: the lowest and highest round's ratio" in page
    assert "| resnet50 | 4 | 32 | 50 | 40 | 1.250x (1.20-1.31) |" in page
    assert "| resnet50 | 2 | 32 | 50 | 40 | 1.250x |" in page  # the older DDP record
    assert "median over alternating rounds" in page
    old = render(records())
    assert "In brackets" not in old and "alternating rounds" not in old


@pytest.mark.parametrize("kind", ["model", "ddp", "host"])
def test_a_page_of_one_kind_renders(kind):
    page = render([r for r in records() if r["kind"] == kind])
    assert page.startswith("# Real models") and "## Commands" in page
