"""The host-time benchmark on the CPU (structure only: times on a shared CI machine mean nothing)."""

import json

import pytest
import torch

from conv_core.bench_host import LAYER, RANKED, TORCH, per_call_us, run_host_bench
from conv_core.cli import main
from test_bench_tune import Plugin, isolate, raising_run, use_backends

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def test_rows_for_torch_the_ranking_and_each_backend(monkeypatch):
    use_backends(monkeypatch, declining=Plugin("declining", raising_run, declines="not for tiny layers"),
                 raising=Plugin("raising", raising_run))
    record = run_host_bench(CPU, calls=2, rounds=1, warmup=1)
    assert record["kind"] == "host" and record["dtype"] == "float32,bfloat16"
    assert record["layer"].startswith("n2 c64 k64 i8x8")
    rows = {(r["dtype"], r["layout"], r["what"], r["label"]): r for r in record["rows"]}
    assert len(rows) == 2 * 2 * 2 * 5  # dtypes x layouts x (fwd, fwd_bwd) x (torch, ranked, aten, declining, raising)
    for dtype in ("float32", "bfloat16"):  # a bf16 call on the CPU takes a path of its own: both are timed
        for layout in ("channels_first", "channels_last"):
            for what in ("fwd", "fwd_bwd"):
                base = rows[(dtype, layout, what, TORCH)]
                assert base["ratio"] == 1.0 and base["host_us"] > 0 and base["wall_us"] >= base["host_us"]
                aten = rows[(dtype, layout, what, f"{RANKED}[aten]")]
                assert aten["kernel"].startswith("aten:") and aten["ratio"] > 0 and aten["failed"] is None
                declined = rows[(dtype, layout, what, f"{RANKED}[declining]")]
                assert declined["host_us"] is None and "not for tiny layers" in declined["skipped"]
                raising = rows[(dtype, layout, what, f"{RANKED}[raising]")]
                assert raising["host_us"] is None and "kernel exploded" in raising["failed"]


def test_per_call_us_interleaves_and_reports_failures():
    calls = []

    def boom():
        raise ValueError("no")

    times, failed = per_call_us({"a": lambda: calls.append("a"), "b": boom, "c": lambda: calls.append("c")}, CPU,
                                calls=3, rounds=2, warmup=1)
    assert set(times) == {"a", "c"} and failed == {"b": "ValueError: no"}
    assert calls == ["a", "c"] + ["a"] * 3 + ["c"] * 3 + ["a"] * 3 + ["c"] * 3
    assert all(t["host_us"] >= 0 and t["wall_us"] >= t["host_us"] for t in times.values())


def test_the_cli_writes_the_record(capsys, tmp_path):
    path = tmp_path / "host.json"
    code = main(["bench", "--host", "--device", "cpu", "--reps", "1", "--calls", "2", "--warmup", "1",
                 "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and "host time per call" in out and "conv_core[aten]" in out
    record = json.loads(path.read_text())
    assert record["kind"] == "host" and record["calls"] == 2 and "--host" in record["command"]
    assert {r["what"] for r in record["rows"]} == {"fwd", "fwd_bwd"} and LAYER == (2, 64, 8, 3)
