"""The held-out ranking benchmark: choosing the problems, judging them, the phases, the summary."""

import json
import os

import pytest
import torch

import conv_core
import conv_tools.suites
from conv_tools import bench_holdout
from conv_tools.bench_holdout import (Layer, judge, markdown, ranking_phase, round_robin, run_holdout, spread,
                                     summarize)
from conv_core.cli import main
from conv_core.problem import ConvProblem
from conv_core.testing.fakes import isolate

CPU = torch.device("cpu")
TINY = ConvProblem("fwd", 1, 4, 8, (6, 6), (3, 3), 1, 1, 1, dtype="float32")


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def test_spread_keeps_the_ends_and_spaces_the_rest():
    assert spread(list(range(10)), 3, key=lambda v: -v) == [9, 5, 0]
    assert spread([3, 1, 2], 5, key=lambda v: v) == [1, 2, 3]
    assert spread([3, 1, 2], 1, key=lambda v: v) == [2]


def test_round_robin_covers_every_group_first():
    assert round_robin([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]
    assert round_robin([]) == []


def test_held_out_layers_are_captured_on_meta_and_kept_apart_from_the_suites():
    seen = set()
    in_sample = bench_holdout.in_sample_layers(dtype="bfloat16", layout="channels_last", arch="sm_90", per_model=2,
                                               seen=seen)
    assert [g[0].source for g in in_sample] == conv_tools.suites.available_suites()
    assert all(len(g) == 6 and g[0].set == "in_sample" for g in in_sample)  # 2 layers x 3 directions
    (held,) = bench_holdout.holdout_layers(("unet_like",), batch=8, dtype="bfloat16", layout="channels_last",
                                           arch="sm_90", per_model=3, seen=seen)
    assert len(held) == 9 and {layer.problem.direction for layer in held} == {"fwd", "bwd_data", "bwd_weight"}
    problems = [layer.problem for layer in held]
    assert all(p.arch == "sm_90" and p.batch == 8 and p.layout == "channels_last" and p.dtype == "bfloat16"
               for p in problems)
    fwd = [layer.problem.key for layer in held if layer.problem.direction == "fwd"]
    assert len(set(fwd)) == 3 and not set(fwd) & {layer.problem.key for g in in_sample for layer in g}


def test_transposed_layers_are_judged_in_their_own_directions():
    """A decoder's ConvTranspose2d layers (captured) and a suite's transposed layers keep their directions:
    the forward is their convolution's bwd_data, and rows and the page say so."""
    captured = bench_holdout.captured_layers("transposed_decoder", batch=1, dtype="bfloat16")
    assert sum(layer.transposed for layer in captured) == 5 and len(captured) == 9
    (held,) = bench_holdout.holdout_layers(("transposed_decoder",), batch=2, dtype="bfloat16",
                                           layout="channels_last", arch="sm_90", per_model=9, seen=set())
    head = {layer.direction: layer.problem.direction for layer in held if layer.name == "head"}
    assert head == {"fwd": "bwd_data", "bwd_data": "fwd", "bwd_weight": "bwd_weight"}
    groups = bench_holdout.in_sample_layers(dtype="float32", layout="channels_first", arch="cpu", per_model=21,
                                            seen=set())
    (seg,) = [g for g in groups if g[0].source == "seg_head_transposed"]
    assert sum(layer.transposed for layer in seg) == 12 * 3
    up = next(layer for layer in held if layer.transposed and layer.direction == "fwd")
    small = Layer("holdout", "m", "up", 1, up.problem.replace(batch=1, in_channels=4, out_channels=8, dtype="float32",
                                                              input_size=(8, 8), arch="cpu", layout="channels_first"),
                  transposed=True)
    row = judge(small, CPU, reps=1, warmup=0)
    assert (row["direction"], row["transposed"], row["failed"]) == ("fwd", True, None)
    summary = summarize([{**row, "ratio": 0.5}], 0.95)
    record = {"dtype": "float32", "layout": "channels_first", "batch": 1, "models": ["m"], "suites": [],
              "per_model": 1, "phases": [{"set": "holdout", "phase": "default", "truncated": 0, "summary": summary}]}
    assert "`up` fwd (transposed): aten:native:default 0.500x" in markdown(record)


def test_judge_times_the_pick_and_aten():
    row = judge(Layer("holdout", "m", "conv1", 2, TINY), CPU, reps=1, warmup=0)
    assert row["pick"] == row["aten"] == "aten:native:default" and row["ratio"] == 1.0 and row["aten_us"] > 0
    assert row["failed"] is None and row["count"] == 2 and row["direction"] == "fwd"


def test_summary_counts_the_layers_below_the_floor():
    def row(ratio, direction="fwd", backend="gluon"):
        return {"ratio": ratio, "direction": direction, "pick_backend": backend, "failed": None}

    rows = [row(2.0), row(0.5, "bwd_data"), row(0.97, "bwd_weight", "aten"),
            {**row(None, backend=None), "failed": "boom"}]
    s = summarize(rows, floor=0.98)
    assert s["problems"] == 4 and s["timed"] == 3 and s["failed"] == 1
    assert s["geomean"] == pytest.approx((2.0 * 0.5 * 0.97) ** (1 / 3)) and s["min"] == 0.5
    assert s["below_floor"] == 2 and s["below_0.95"] == 1
    assert s["by_direction"] == {"fwd": 2.0, "bwd_data": 0.5, "bwd_weight": 0.97}
    assert s["picks_by_backend"] == {"gluon": 2, "aten": 1, "none": 1}
    assert [r["ratio"] for r in s["worst"]] == [0.5, 0.97, 2.0]


def test_ranking_phase_sets_benchmark_mode_and_restores_it(monkeypatch):
    monkeypatch.setenv("CONV_CORE_BENCHMARK", "0")
    before = torch.backends.cudnn.benchmark
    with ranking_phase("benchmark"):
        assert conv_core.get_engine().settings.benchmark and torch.backends.cudnn.benchmark
    assert os.environ["CONV_CORE_BENCHMARK"] == "0" and not conv_core.get_engine().settings.benchmark
    assert torch.backends.cudnn.benchmark == before
    with ranking_phase("default"):
        assert not conv_core.get_engine().settings.benchmark


def test_run_on_the_cpu_and_its_markdown():
    record = run_holdout(CPU, models=("tiny",), batch=1, dtype="float32", per_model=2, sets=("holdout",), reps=1,
                         warmup=0, budget_s=60)
    json.dumps(record, allow_nan=False)
    assert record["kind"] == "holdout" and record["problems"] == {"holdout": 6} and record["complete"]
    assert [(p["set"], p["phase"]) for p in record["phases"]] == [("holdout", "default"), ("holdout", "benchmark")]
    for result in record["phases"]:
        assert result["truncated"] == 0 and result["summary"]["timed"] == 6
        assert result["summary"]["geomean"] == 1.0 and result["summary"]["picks_by_backend"] == {"aten": 6}
    text = markdown(record)
    assert "| holdout | default | 6 | 1.000x | 1.000x | 0 < 0.95x |" in text
    assert "| holdout | benchmark | 6 |" in text and "0 < 0.98x" in text


def test_markdown_lists_the_layers_below_the_floor():
    worst = {"source": "yolo_like", "layer": "stem.0", "direction": "fwd", "pick": "gluon:k:c", "ratio": 0.5,
             "pick_us": 20.0, "aten_us": 10.0}
    summary = {"timed": 1, "geomean": 0.5, "min": 0.5, "below_floor": 1, "by_direction": {},
               "picks_by_backend": {"gluon": 1}, "worst": [worst]}
    summary["by_direction"] = {"fwd": 0.5, "bwd_data": None, "bwd_weight": None}
    record = {"dtype": "bfloat16", "layout": "channels_last", "batch": 8, "models": ["yolo_like"], "suites": [],
              "per_model": 8, "phases": [{"set": "holdout", "phase": "default", "truncated": 3, "summary": summary}]}
    text = markdown(record)
    assert "| holdout | default | 1 (+3 not reached) | 0.500x |" in text
    assert "- yolo_like `stem.0` fwd: gluon:k:c 0.500x (20.0 us vs aten 10.0 us)" in text


def test_the_cli_runs_a_budget_of_zero_and_rejects_unknown_models(capsys, tmp_path):
    path = tmp_path / "holdout.json"
    assert main(["bench", "--holdout", "--models", "tiny", "--device", "cpu", "--dtype", "fp32", "--layers", "1",
                 "--budget-s", "0", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert record["problems"]["holdout"] == 3 and len(record["phases"]) == 4
    assert all(p["rows"] == [] and p["truncated"] == record["problems"][p["set"]] for p in record["phases"])
    assert "--holdout --models tiny" in record["command"]
    capsys.readouterr()
    assert main(["bench", "--holdout", "--models", "tiny,nosuch", "--device", "cpu"]) == 2
    assert "unknown model(s) nosuch" in capsys.readouterr().err
    assert main(["bench", "--holdout", "--models", "tiny", "--device", "cpu", "--phases", "default,tuned"]) == 2
    assert "unknown phase(s) tuned; phases: default, benchmark" in capsys.readouterr().err


def test_the_cli_runs_one_set_and_one_phase(tmp_path):
    path = tmp_path / "holdout.json"
    assert main(["bench", "--holdout", "--models", "tiny", "--device", "cpu", "--dtype", "fp32", "--layers", "1",
                 "--sets", "holdout", "--phases", "benchmark", "--reps", "1", "--warmup", "0", "--json",
                 str(path)]) == 0
    record = json.loads(path.read_text())
    assert [(p["set"], p["phase"], p["summary"]["timed"]) for p in record["phases"]] == [("holdout", "benchmark", 3)]
