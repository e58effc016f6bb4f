"""bench and tune as library functions: measuring, recording errors, gating, the tuning database."""

import csv
import json

import pytest
import torch

import conv_core
from conv_core import Candidate, ConvProblem
from conv_tools.bench import TORCH, format_report, run_bench, summarize, to_json, torch_reference, write_csv, write_json
from conv_core.engine import get_engine
from conv_core.explanation import explain
from conv_core.reference import random_operands
from conv_tools.tune import run_tune
from conv_core.tuning import Entry, read_entries, write_entries

from conv_core.testing.fakes import (CPU, TINY, Plugin, isolate, raising_backend, use_backends, wrong_backend)

POINTWISE = ConvProblem("fwd", 2, 8, 4, (5, 5), (1, 1), 1, 0, 1, dtype="float32")


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


# ---- bench -------------------------------------------------------------------------------------------


def test_bench_times_every_candidate_and_torch():
    rows = run_bench([("conv1", TINY), ("conv2", POINTWISE)], CPU, reps=2, warmup=0, progress=False)
    assert [r.layer for r in rows] == ["conv1", "conv2"]
    for row in rows:
        kernels = [m.kernel for m in row.measurements]
        assert kernels == ["aten:native:default", TORCH]
        assert all(m.us > 0 for m in row.measurements)
        assert row.picked == "aten:native:default" and row.picked_source == "estimate"
        assert row.fastest.kernel == row.picked and row.picked_over_fastest == 1.0
        assert row.pick_speedup == 1.0 and row.tflops(row.aten_us) > 0
    summary = summarize(rows)
    assert summary["picked_fastest"] == summary["judged"] == 2 and summary["errors"] == 0
    assert summary["geomean_pick_speedup"] == pytest.approx(1.0)


def test_bench_records_a_raising_candidate_and_goes_on(monkeypatch):
    from conv_core.testing.fakes import prove_faster

    prove_faster(use_backends(monkeypatch, raising=raising_backend()), [TINY], ["raising:k:c"])
    rows = run_bench([("conv1", TINY)], CPU, reps=2, warmup=0, progress=False)
    by_kernel = {m.kernel: m for m in rows[0].measurements}
    assert "kernel exploded" in by_kernel["raising:k:c"].error and by_kernel["raising:k:c"].us is None
    assert by_kernel["aten:native:default"].ok
    assert rows[0].picked == "raising:k:c"  # its (stale) measured time wins the ranking; the bench shows it fails
    assert rows[0].picked_us is None and rows[0].fastest.kernel == "aten:native:default"
    report = format_report(rows, "cpu")
    assert "errors:" in report and "raising:k:c: RuntimeError: kernel exploded" in report
    assert summarize(rows)["errors"] == 1


def test_torch_reference_only_for_plain_forward_calls():
    assert torch_reference(TINY, random_operands(TINY, CPU))[0] is not None
    asym = TINY.replace(padding=((1, 0), (0, 1)))
    assert torch_reference(asym, random_operands(asym, CPU)) == (None, "asymmetric padding")
    bwd = TINY.with_direction("bwd_data")
    assert torch_reference(bwd, random_operands(bwd, CPU)) == (None, "forward only")
    rows = run_bench([("asym", asym), ("bwd", bwd)], CPU, reps=1, warmup=0, progress=False)
    assert rows[0].measurements[-1].skipped == "asymmetric padding"
    assert TORCH not in [m.kernel for m in rows[1].measurements]


def test_torch_reference_matches_aten_with_epilogue():
    problem = TINY.replace(bias=True, activation="relu")
    operands = random_operands(problem, CPU)
    call, _ = torch_reference(problem, operands)
    (aten,), _ = get_engine().registry.candidates(problem, CPU)
    torch.testing.assert_close(call(), aten.run(*operands))


def test_bench_outputs_csv_and_json(tmp_path):
    rows = run_bench([("conv1", TINY)], CPU, reps=1, warmup=0, progress=False)
    write_csv(rows, tmp_path / "b.csv")
    lines = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert [line["kernel"] for line in lines] == ["aten:native:default", TORCH]
    assert lines[0]["picked"] == "1" and lines[0]["fastest"] == "1" and float(lines[0]["us"]) > 0
    write_json(rows, tmp_path / "b.json", CPU, reps=1, warmup=0)
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["arch"] == "cpu" and data["summary"]["problems"] == 1
    assert data["rows"][0]["picked"] == "aten:native:default" and data["rows"][0]["measurements"][0]["us"] > 0
    assert to_json(rows, CPU, reps=1, warmup=0)["rows"] == data["rows"]


def test_chart_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from conv_tools.chart import bar_chart

    rows = run_bench([("conv1", TINY), ("conv2", POINTWISE)], CPU, reps=1, warmup=0, progress=False)
    path = bar_chart(rows, tmp_path / "b.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_without_matplotlib_says_how_to_install(monkeypatch):
    import sys

    from conv_tools.chart import ChartUnavailable, require_matplotlib

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ChartUnavailable, match="pip install"):
        require_matplotlib()


# ---- tune --------------------------------------------------------------------------------------------


def test_tune_gates_stores_and_takes_effect(monkeypatch, tmp_path):
    use_backends(monkeypatch, wrong=wrong_backend(), raising=raising_backend())
    before = explain(TINY, device=CPU)
    assert before.picked == "aten:native:default" and before.rows[0].source == "estimate"
    assert {r.kernel for r in before.rows[1:]} == {"wrong:k:c", "raising:k:c"}

    seen = []
    entries = run_tune([("conv1", TINY)], CPU, reps=2, warmup=0, progress=False,
                       on_result=lambda layer, entry, detail: seen.append((entry.kernel, entry.status, detail)))
    status = {e.kernel: e.status for e in entries}
    assert status == {"aten:native:default": "ok", "wrong:k:c": "broken", "raising:k:c": "broken"}
    details = {kernel: detail for kernel, _, detail in seen}
    assert "MISMATCH" in details["wrong:k:c"] and "kernel exploded" in details["raising:k:c"]
    assert details["aten:native:default"] == ""
    aten = next(e for e in entries if e.status == "ok")
    assert aten.device == "cpu" and aten.arch == "cpu" and aten.problem == TINY.key and aten.us > 0
    assert aten.backend_version == get_engine().versions()["aten"]
    assert set(read_entries(tmp_path / "tuning.json")) == set(entries)

    after = explain(TINY, device=CPU)  # tune reset the engine: the new times are used at once
    assert after.picked == "aten:native:default" and after.rows[0].source == "tuning-db"
    assert {k for k, _ in after.excluded} == {"wrong:k:c", "raising:k:c"}
    assert all("broken (tuning-db)" in why for _, why in after.excluded)
    y = conv_core.conv2d(*random_operands(TINY, CPU), padding=1)  # the real call avoids the wrong kernel
    assert y.abs().sum() > 0


def test_tune_merges_into_the_database_and_exports(tmp_path):
    db, table = tmp_path / "db.json", tmp_path / "table.json"
    other = Entry("cpu", "cpu", POINTWISE.key, "aten:native:default", "old", 5.0)
    stale = Entry("cpu", "cpu", TINY.key, "aten:native:default", "old", 1e9)
    write_entries(db, [other, stale])
    entries = run_tune([("conv1", TINY)], CPU, reps=1, warmup=0, db_path=db, export=table, progress=False)
    stored = read_entries(db)
    assert other in stored and stale not in stored and entries[0] in stored and len(stored) == 2
    assert set(read_entries(table)) == set(entries)
    assert not (tmp_path / "tuning.json").exists()  # an explicit db_path leaves the default alone


def test_tune_one_backend_and_aten_beside_it(monkeypatch, tmp_path):
    """One backend's candidates, plus aten's measured times to rank them against; no other backend's."""
    use_backends(monkeypatch, wrong=wrong_backend(), raising=raising_backend())
    entries = run_tune([("conv1", TINY)], CPU, reps=1, warmup=0, backend="wrong", progress=False)
    assert [(e.kernel, e.status) for e in entries] == [("aten:native:default", "ok"), ("wrong:k:c", "broken")]
    assert entries[0].us > 0


def test_bench_skips_candidates_tuned_as_broken(monkeypatch):
    use_backends(monkeypatch, wrong=wrong_backend())
    run_tune([("conv1", TINY)], CPU, reps=1, warmup=0, progress=False)
    (row,) = run_bench([("conv1", TINY)], CPU, reps=1, warmup=0, progress=False)
    wrong = next(m for m in row.measurements if m.kernel == "wrong:k:c")
    assert wrong.us is None and "broken" in wrong.skipped
    assert row.picked == row.fastest.kernel == "aten:native:default"


def test_gate_keeps_the_aten_fallback_when_it_is_only_imprecise(monkeypatch):
    import conv_tools.tune as tune_module
    from conv_core.reference import Comparison

    use_backends(monkeypatch, good=Plugin("good", lambda problem, *ops, out=None: torch.ones(1)))
    imprecise = Comparison(False, 3.0, 1e-3, 7, 0, "MISMATCH; 7 elements out of tolerance")
    monkeypatch.setattr(tune_module, "compare", lambda *args, **kwargs: imprecise)
    results = {e.kernel: (e.status, detail) for e, detail in tune_module.tune_problem(TINY, CPU, reps=1, warmup=0)}
    assert results["aten:native:default"][0] == "ok" and "kept as the fallback" in results["aten:native:default"][1]
    assert results["good:k:c"] == ("broken", imprecise.message)


def test_gate_rejects_a_result_of_the_wrong_shape(monkeypatch):
    from conv_tools.tune import gate

    (aten,), _ = get_engine().registry.candidates(TINY, CPU)
    wrong_shape = Candidate("x", "k", "c", lambda *ops, out=None: torch.ones(3, 3), estimate_us=1.0)
    operands = random_operands(TINY, CPU)
    assert gate(TINY, aten, operands) == (True, "")
    usable, detail = gate(TINY, wrong_shape, operands)
    assert not usable and detail


def test_a_transposed_layer_is_labelled_and_timed_against_conv_transpose(tmp_path):
    """A suite's transposed layer runs as its convolution's bwd_data, shown as the layer's forward; PyTorch's
    call is the ``conv_transpose2d`` a user would write, and it computes what aten's candidate does."""
    from conv_tools.suites import SuiteLayer

    layer = SuiteLayer("up", 4, 6, (9, 9), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), transposed=True)
    problems = [("up", layer.problem(2, dtype="float32", direction=d)) for d in ("fwd", "bwd_data")]
    rows = run_bench(problems + [("conv1", TINY)], CPU, reps=1, warmup=0, progress=False,
                     transposed=frozenset({"up"}))
    assert [(r.problem.direction, r.direction, r.direction_label) for r in rows] == [
        ("bwd_data", "fwd", "fwd (transposed)"), ("fwd", "bwd_data", "bwd_data (transposed)"),
        ("fwd", "fwd", "fwd")]
    assert rows[0].aten_us and rows[0].torch_us and rows[2].torch_us
    assert rows[1].torch_us is None  # the transposed layer's data gradient has no plain PyTorch call
    operands = random_operands(problems[0][1], CPU)
    call, _ = torch_reference(problems[0][1], operands, transposed=True)
    (aten,), _ = get_engine().registry.candidates(problems[0][1], CPU)
    assert call().shape == (2, 4, 9, 9)  # output_padding 0: (5 - 1) * 2 - 2 + 3 = 9
    torch.testing.assert_close(call(), aten.run(*operands))
    assert "fwd (transposed)" in format_report(rows, "cpu")
    write_json(rows, tmp_path / "b.json", CPU, reps=1, warmup=0)
    saved = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [(r["direction"], r["transposed"]) for r in saved] == [("fwd", True), ("bwd_data", True), ("fwd", False)]
    write_csv(rows, tmp_path / "b.csv")
    assert {line["direction"] for line in csv.DictReader(open(tmp_path / "b.csv"))} == {
        "fwd (transposed)", "bwd_data (transposed)", "fwd"}
