"""``conv-core tables``: tables split by backend, bench runs folded in conservatively, the runs each table names,
the ranking replayed on measured runs (small fixtures; no GPU)."""

from __future__ import annotations

import json
import math

from conv_tools import tables
from conv_core.cli import main
from conv_tools.tables_replay import score
from conv_tools.tune import store
from conv_core.tuning import Entry, read_entries, read_runs, write_entries

KEY = "fwd n32 c64 k64 g1 i56x56 f3x3 s1x1 p1.1x1.1 d1x1 bf16.bf16.bf16 cl b0 a- sm_90"
OTHER = "bwd_data n32 c64 k64 g1 i56x56 f3x3 s1x1 p1.1x1.1 d1x1 bf16.bf16.bf16 cf b0 a- sm_90"


def entry(kernel: str, us: float, problem: str = KEY) -> Entry:
    return Entry("NVIDIA H100 80GB HBM3", "sm_90", problem, kernel, "0.1.0", us)


def bench_file(path, times: dict[tuple[str, str], float]):
    """A ``conv-core bench --json`` file with one row per problem of ``times``."""
    rows = {}
    for (problem, kernel), us in times.items():
        rows.setdefault(problem, []).append({"kernel": kernel, "us": us})
    path.write_text(json.dumps({"rows": [{"problem": p, "measurements": m} for p, m in rows.items()]}))
    return str(path)


def test_split_writes_one_table_per_backend_naming_the_run(tmp_path):
    db = tmp_path / "tuning.json"
    write_entries(db, [entry("aten:native:default", 10.0), entry("rdna:implicit_gemm:a", 8.0),
                       entry("rdna:gemm1x1:b", 9.0, OTHER)])
    written = tables.split(db, tmp_path / "out", run="log #1: a test run")
    assert written == {"aten_sm_90.json": 1, "rdna_sm_90.json": 2}
    assert read_runs(tmp_path / "out" / "rdna_sm_90.json") == ["log #1: a test run"]


def test_combine_is_conservative_against_the_plugin_and_appends_the_run(tmp_path):
    old = tmp_path / "tables"
    write_entries(old / "aten_sm_90.json", [entry("aten:native:default", 10.0)], runs=["log #1"])
    write_entries(old / "rdna_sm_90.json", [entry("rdna:implicit_gemm:a", 8.0), entry("rdna:winograd:w", 50.0)],
                  runs=["log #1"])
    bench = bench_file(tmp_path / "resnet50_fwd_nhwc.json", {
        (KEY, "aten:native:default"): 12.0, (KEY, "rdna:implicit_gemm:a"): 9.0, (KEY, "rdna:winograd:w"): 20.0,
        (KEY, "rdna:conv3x3:new"): 7.0, (KEY, "torch"): 11.0})
    tables.combine(old, tmp_path / "out", [bench], tables.Fold(replace=("rdna:winograd:",)), run="log #2")
    aten = {e.kernel: e.us for e in read_entries(tmp_path / "out" / "aten_sm_90.json")}
    rdna = {e.kernel: e.us for e in read_entries(tmp_path / "out" / "rdna_sm_90.json")}
    assert aten == {"aten:native:default": 10.0}  # aten keeps the faster
    assert rdna == {"rdna:implicit_gemm:a": 9.0,  # a plugin kernel the slower
                    "rdna:winograd:w": 20.0,  # replaced: its earlier time was wrong
                    "rdna:conv3x3:new": 7.0}  # a kernel the table lacked, from the bench
    assert read_runs(tmp_path / "out" / "rdna_sm_90.json") == ["log #1", "log #2"]


def test_combine_drops_rewritten_kernels_on_the_problems_the_bench_timed(tmp_path):
    old = tmp_path / "tables"
    write_entries(old / "rdna_sm_90.json", [entry("rdna:few:a", 30.0), entry("rdna:few:a", 40.0, OTHER)])
    bench = bench_file(tmp_path / "b.json", {(KEY, "rdna:few:a"): 20.0})
    tables.combine(old, tmp_path / "out", [bench], tables.Fold(drop=("rdna:few:",)))
    times = {e.problem: e.us for e in read_entries(tmp_path / "out" / "rdna_sm_90.json")}
    assert times == {KEY: 20.0, OTHER: 40.0}


def test_a_rewritten_table_keeps_its_runs(tmp_path):
    """``conv-core tune --export`` merges into a shipped table: the runs it names stay."""
    table = tmp_path / "rdna_sm_90.json"
    write_entries(table, [entry("rdna:implicit_gemm:a", 8.0)], runs=["log #17: 2026-11-22 rdna-13"])
    store([entry("rdna:implicit_gemm:b", 7.0)], table)
    assert read_runs(table) == ["log #17: 2026-11-22 rdna-13"]
    assert len(read_entries(table)) == 2
    write_entries(tmp_path / "db.json", [entry("rdna:implicit_gemm:a", 8.0)])  # a database names no run
    assert "runs" not in json.loads((tmp_path / "db.json").read_text())


def test_show_prints_the_runs_and_the_entries(tmp_path, capsys):
    table = tmp_path / "rdna_sm_90.json"
    write_entries(table, [entry("rdna:implicit_gemm:a", 8.0), entry("rdna:gemm1x1:b", 9.0, OTHER)],
                  runs=["log #17: 2026-11-22 rdna-13 runs 33-36"])
    assert main(["tables", "show", str(table)]) == 0
    out = capsys.readouterr().out
    assert "2 entries (0 broken), sm_90" in out and "log #17: 2026-11-22 rdna-13 runs 33-36" in out
    assert "fwd nhwc rdna:implicit_gemm" in out and "bwd_data nchw rdna:gemm1x1" in out


def test_split_and_combine_through_the_command(tmp_path, capsys):
    db = tmp_path / "tuning.json"
    write_entries(db, [entry("aten:native:default", 10.0), entry("rdna:implicit_gemm:a", 8.0)])
    assert main(["tables", "split", str(db), str(tmp_path / "t"), "--run", "log #3"]) == 0
    bench = bench_file(tmp_path / "b.json", {(KEY, "rdna:implicit_gemm:a"): 9.5})
    assert main(["tables", "combine", str(tmp_path / "t"), str(tmp_path / "o"), bench, "--run", "log #4"]) == 0
    assert "rdna_sm_90.json: 1 entries" in capsys.readouterr().out
    assert read_runs(tmp_path / "o" / "rdna_sm_90.json") == ["log #3", "log #4"]
    assert [e.us for e in read_entries(tmp_path / "o" / "rdna_sm_90.json")] == [9.5]


def test_replay_scores_the_picks_against_each_run():
    def row(picked, times):
        return {"layer": "conv", "picked": picked, "aten_us": times["aten:native:default"],
                "measurements": [{"kernel": k, "us": us} for k, us in times.items()]}

    first = {KEY: row("rdna:a", {"aten:native:default": 10.0, "rdna:a": 5.0, "rdna:b": 4.0}),
             OTHER: row("aten:native:default", {"aten:native:default": 10.0, "rdna:a": 20.0})}
    second = {KEY: row("rdna:a", {"aten:native:default": 10.0, "rdna:a": 12.5})}
    result = score([first, second], {KEY: "rdna:a", OTHER: "rdna:a"}.get)
    assert result.worst == [0.8, 0.5]  # the worst run of each layer
    assert result.same == [1, 1] and len(result.slower) == 2
    assert result.over_fastest == [1.25, 2.0]
    assert math.isclose(float(result.lines()[0].split("geomean ")[1].split(",")[0]), math.sqrt(0.4), abs_tol=1e-3)


def test_split_merges_into_the_shipped_tables(tmp_path):
    """A tuning of new suites joins the shipped tables: their entries and runs stay, the database's win."""
    shipped = tmp_path / "tables"
    write_entries(shipped / "rdna_sm_90.json", [entry("rdna:implicit_gemm:a", 8.0), entry("rdna:gemm1x1:b", 5.0)],
                  runs=["log #17"])
    db = tmp_path / "tuning.json"
    write_entries(db, [entry("rdna:implicit_gemm:a", 7.0), entry("rdna:implicit_gemm:a", 3.0, OTHER)])
    tables.split(db, shipped, run="log #23", merge=True)
    merged = {(e.problem, e.kernel): e.us for e in read_entries(shipped / "rdna_sm_90.json")}
    assert merged == {(KEY, "rdna:implicit_gemm:a"): 7.0, (KEY, "rdna:gemm1x1:b"): 5.0,
                      (OTHER, "rdna:implicit_gemm:a"): 3.0}
    assert read_runs(shipped / "rdna_sm_90.json") == ["log #17", "log #23"]


def test_combine_adds_a_new_suites_times_for_aten_too(tmp_path):
    """A plugin displaces aten only where both were measured: a bench of new layers adds aten's times too."""
    old = tmp_path / "tables"
    write_entries(old / "aten_sm_90.json", [entry("aten:native:default", 10.0)])
    write_entries(old / "rdna_sm_90.json", [entry("rdna:implicit_gemm:a", 8.0)])
    bench = bench_file(tmp_path / "b.json", {(OTHER, "aten:native:default"): 12.0, (OTHER, "rdna:grouped:g"): 6.0,
                                             (OTHER, "torch"): 11.0})
    tables.combine(old, tmp_path / "out", [bench])
    aten = {(e.problem, e.kernel): e.us for e in read_entries(tmp_path / "out" / "aten_sm_90.json")}
    rdna = {(e.problem, e.kernel): e.us for e in read_entries(tmp_path / "out" / "rdna_sm_90.json")}
    assert aten == {(KEY, "aten:native:default"): 10.0, (OTHER, "aten:native:default"): 12.0}
    assert rdna == {(KEY, "rdna:implicit_gemm:a"): 8.0, (OTHER, "rdna:grouped:g"): 6.0}
