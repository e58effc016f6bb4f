"""conv-tools' subcommands of the conv-core command (bench, tune), run in-process through main([...])."""

import io
import json
import sys

import pytest

import conv_core
from conv_core.cli import main
from conv_core.tuning import read_entries
from conv_core.testing.fakes import isolate, use_backends, wrong_backend
from conv_tools.progress import Progress
from suite_files import write_suite

SHAPE = "n2 c4 k8 i6x6 f3x3 s1 p1"
FP32 = ["--dtype", "fp32", "--layout", "nchw", "--device", "cpu"]


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


@pytest.fixture
def tiny_suite(tmp_path):
    """A two-layer suite file (``--suite`` also takes the path of a suite JSON)."""
    return write_suite(tmp_path / "tiny.json", [("conv1", 4, 8, 6, 3, 1), ("conv2", 8, 4, 5, 1, 0),
                                                ("conv3", 4, 4, 4, 3, 1)])


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["bench", "--suite", "no-such-suite"], "unknown suite 'no-such-suite'"),
    (["tune", "--suite", "no-such-suite"], "unknown suite"),
    (["bench", "--shape", "n2 c4 q9"], "cannot read 'q9'"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_option_values_exit_2(capsys):
    assert run(capsys, "bench", "--shape", SHAPE, "--dtype", "int8")[0] == 2
    assert run(capsys, "bench", "--shape", SHAPE, "--layout", "nhcw")[0] == 2
    assert run(capsys, "bench")[0] == 2  # no problem chosen


# ---- bench ---------------------------------------------------------------------------------------------


def test_bench_a_suite_writes_csv_and_json(capsys, tiny_suite, tmp_path):
    csv_path, json_path = tmp_path / "b.csv", tmp_path / "b.json"
    code, out, _ = run(capsys, "bench", "--suite", tiny_suite, "--layers", "2", "--direction", "all", *FP32,
                       "--reps", "2", "--warmup", "0", "--csv", str(csv_path), "--json", str(json_path))
    assert code == 0
    assert "conv1" in out and "conv2" in out and "conv3" not in out and "bwd_weight" in out
    assert "6 problems on cpu" in out and "pick was the fastest in" in out
    data = json.loads(json_path.read_text())
    assert [(r["layer"], r["direction"]) for r in data["rows"]][:3] == [
        ("conv1", "fwd"), ("conv1", "bwd_data"), ("conv1", "bwd_weight")]
    assert data["summary"]["problems"] == 6 and data["rows"][0]["torch_us"] > 0
    assert len(csv_path.read_text().splitlines()) == 1 + 6 + 2  # header, aten per problem, torch per forward


def test_bench_and_tune_a_suite_with_a_transposed_layer(capsys, tmp_path):
    """A transposed layer's directions map onto its convolution's, and every table shows them as the layer's."""
    from conv_tools.suites import Suite, SuiteLayer

    up = SuiteLayer("up", 4, 6, (8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), transposed=True)
    path = tmp_path / "dec.json"
    path.write_text(json.dumps(Suite("dec", "test", (up,), default_batch=2).to_json()))
    code, out, _ = run(capsys, "bench", "--suite", str(path), "--direction", "all", *FP32, "--reps", "1",
                       "--warmup", "0", "--json", str(tmp_path / "b.json"))
    assert code == 0 and "fwd (transposed)" in out and "bwd_weight (transposed)" in out
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [(r["direction"], r["problem"].split()[0]) for r in rows] == [
        ("fwd", "bwd_data"), ("bwd_data", "fwd"), ("bwd_weight", "bwd_weight")]
    assert rows[0]["torch_us"] > 0  # F.conv_transpose2d
    code, out, _ = run(capsys, "tune", "--suite", str(path), "--direction", "fwd", *FP32, "--reps", "1",
                       "--warmup", "0", "--db", str(tmp_path / "db.json"))
    assert code == 0 and "fwd (transposed)" in out


def test_bench_json_to_stdout(capsys):
    code, out, _ = run(capsys, "bench", "--shape", SHAPE, *FP32, "--reps", "1", "--warmup", "0", "--json", "-")
    assert code == 0 and json.loads(out)["rows"][0]["picked"] == "aten:native:default"


def test_bench_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "b.png"
    code, _, _ = run(capsys, "bench", "--shape", SHAPE, *FP32, "--reps", "1", "--warmup", "0", "--png", str(png))
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_bench_png_without_matplotlib_fails_before_benchmarking(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run(capsys, "bench", "--shape", SHAPE, *FP32, "--png", str(tmp_path / "b.png"))
    assert code == 2 and out == "" and "matplotlib" in err


# ---- tune ----------------------------------------------------------------------------------------------


def test_tune_then_explain_uses_the_database(capsys, tmp_path, monkeypatch):
    db = tmp_path / "mine.json"
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(db))
    conv_core.reset()
    code, out, _ = run(capsys, "tune", "--shape", SHAPE, *FP32, "--reps", "2", "--warmup", "0")
    assert code == 0 and "aten:native:default" in out and f"written to {db}" in out
    (entry,) = read_entries(db)
    assert entry.status == "ok" and entry.us > 0
    code, out, _ = run(capsys, "explain", "--shape", SHAPE, *FP32, "--json")
    ranked = json.loads(out)["ranked"]
    assert ranked[0]["source"] == "tuning-db" and ranked[0]["us"] == pytest.approx(entry.us)


def test_tune_records_a_broken_candidate_and_exports(capsys, tmp_path, monkeypatch):
    use_backends(monkeypatch, wrong=wrong_backend())
    table = tmp_path / "table.json"
    code, out, _ = run(capsys, "tune", "--shape", SHAPE, *FP32, "--reps", "1", "--warmup", "0",
                       "--db", str(tmp_path / "db.json"), "--export", str(table))
    assert code == 0 and "broken" in out and "MISMATCH" in out and "(1 broken)" in out
    assert {e.kernel: e.status for e in read_entries(table)} == {"aten:native:default": "ok", "wrong:k:c": "broken"}


def test_tune_one_backend_times_aten_too(capsys, tmp_path, monkeypatch):
    """Like with like: the backend's measured times are stored beside aten's measured times, not its estimate."""
    use_backends(monkeypatch, wrong=wrong_backend())
    db = tmp_path / "db.json"
    code, out, _ = run(capsys, "tune", "--shape", SHAPE, *FP32, "--reps", "1", "--warmup", "0", "--backend", "wrong",
                       "--db", str(db))
    assert code == 0 and "aten:native:default" in out and "wrong:k:c" in out
    entries = {e.kernel: e for e in read_entries(db)}
    assert set(entries) == {"aten:native:default", "wrong:k:c"}
    assert entries["aten:native:default"].status == "ok" and entries["aten:native:default"].us > 0
    assert entries["wrong:k:c"].status == "broken"
    code, _, err = run(capsys, "tune", "--shape", SHAPE, *FP32, "--backend", "nosuch", "--db", str(db))
    assert code == 2 and "no backend named 'nosuch'" in err


def test_tune_aten_alone_is_not_doubled(capsys, tmp_path):
    db = tmp_path / "db.json"
    assert run(capsys, "tune", "--shape", SHAPE, *FP32, "--reps", "1", "--warmup", "0", "--backend", "aten",
               "--db", str(db))[0] == 0
    assert [e.kernel for e in read_entries(db)] == ["aten:native:default"]


# ---- check ---------------------------------------------------------------------------------------------


def test_progress_draws_only_on_a_terminal_or_when_forced():
    quiet = io.StringIO()
    with Progress(3, "bench", stream=quiet) as bar:  # a StringIO is not a terminal
        bar.step("a")
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    with Progress(2, "bench", mode="always", stream=loud) as bar:
        bar.step("layer1")
        bar.step("layer2")
    text = loud.getvalue()
    lines = text.split("\r")[1:]
    assert len(lines) == 3 and "[" + "." * 20 + "] 1/2 layer1" in lines[0] and "2/2 layer2" in lines[1]
    assert "[" + "#" * 20 + "] 2/2 done" in lines[2] and text.endswith("\n")
    with pytest.raises(ValueError):
        Progress(1, mode="sometimes")


