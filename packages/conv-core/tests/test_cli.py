"""The conv-core command, run in-process through main([...])."""

import json

import pytest

import conv_core
from conv_core.cli import main
from conv_core.text_table import format_table
from conv_core.testing.fakes import NoInfo, isolate, use_backends, wrong_backend

SHAPE = "n2 c4 k8 i6x6 f3x3 s1 p1"
FP32 = ["--dtype", "fp32", "--layout", "nchw", "--device", "cpu"]


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- backends, info ----------------------------------------------------------------------------------


def test_backends_lists_aten_and_load_errors(capsys, monkeypatch):
    use_backends(monkeypatch, noinfo=NoInfo())
    code, out, _ = run(capsys, "backends")
    assert code == 0
    assert "aten" in out and "builtin" in out and "noinfo" in out and "load error: ImportError" in out
    code, out, _ = run(capsys, "backends", "--json")
    data = {b["name"]: b for b in json.loads(out)}
    assert data["aten"]["status"] == "ok" and data["aten"]["targets"] == ["any"]
    assert data["noinfo"]["status"].startswith("load error") and data["noinfo"]["version"] is None


def test_info(capsys):
    code, out, _ = run(capsys, "info")
    assert code == 0 and "torch:" in out and "tuning_db:" in out and "CONV_CORE_TUNING_DB" in out
    code, out, _ = run(capsys, "info", "--json")
    data = json.loads(out)
    assert data["devices"][0]["arch"] == "cpu" and data["versions"]["conv-core"] == conv_core.__version__
    assert data["tuning_db"]["entries"] == 0 and data["versions"]["torch"]


def test_info_reports_the_nondeterministic_setting(capsys, monkeypatch):
    key = "non-deterministic by time (CONV_CORE_NONDETERMINISTIC)"
    code, out, _ = run(capsys, "info", "--json")
    assert code == 0 and json.loads(out)["settings"][key] is False
    monkeypatch.setenv("CONV_CORE_NONDETERMINISTIC", "1")
    code, out, _ = run(capsys, "info")
    assert code == 0 and f"  {key}: True" in out


# ---- explain -------------------------------------------------------------------------------------------


def test_explain_shape_and_key(capsys):
    code, out, _ = run(capsys, "explain", "--shape", SHAPE, *FP32, "--bias", "--activation", "relu")
    assert code == 0 and "aten:native:default" in out and "b1 arelu cpu" in out
    code, out, _ = run(capsys, "explain", "--shape", SHAPE, "--direction", "bwd_weight", "--device", "cpu", "--json")
    data = json.loads(out)
    assert data["problem"].startswith("bwd_weight n2 c4 k8") and " bf16.bf16.bf16 cl " in data["problem"]
    key = "bwd_data n2 c4 k6 g1 i8x8 f3x3 s1x1 p1.2x0.1 d1x1 f32.f32.f32 cf b0 a- cpu"
    code, out, _ = run(capsys, "explain", "--key", key, "--device", "cpu", "--json")
    assert json.loads(out)["problem"] == key


def test_explain_an_unknown_backend_exits_2_naming_the_loaded_ones(capsys, monkeypatch):
    use_backends(monkeypatch, wrong=wrong_backend(), noinfo=NoInfo())
    code, out, err = run(capsys, "explain", "--shape", SHAPE, *FP32, "--backend", "nosuch")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no backend named 'nosuch'; loaded: aten, wrong; failed to load: noinfo" in err
    assert run(capsys, "explain", "--shape", SHAPE, *FP32, "--backend", "wrong")[0] == 0


@pytest.mark.parametrize("argv, message", [
    (["explain", "--shape", "n2 c4 q9"], "cannot read 'q9'"),
    (["explain", "--shape", "c4 k8 i6x6"], "lacks f"),
    (["explain", "--key", "nonsense"], "not a problem key"),
    (["explain", "--shape", SHAPE, "--activation", "nope"], "activation='nope'"),
    (["warmup", "--shape", "n2 c4 q9"], "cannot read 'q9'"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_option_values_exit_2(capsys):
    assert run(capsys, "explain", "--shape", SHAPE, "--dtype", "int8")[0] == 2
    assert run(capsys, "explain", "--shape", SHAPE, "--layout", "nhcw")[0] == 2
    assert run(capsys, "explain")[0] == 2  # no problem chosen
    assert run(capsys, "--version")[0] == 0


def test_a_tooling_command_without_its_package_names_the_package(capsys, monkeypatch):
    """bench, tune and tables come with conv-tools: where no package adds them, the command says which to install."""
    from conv_core import cli

    monkeypatch.setattr(cli.metadata, "entry_points", lambda group: [])
    for command in ("bench", "tune", "tables"):
        code, out, err = run(capsys, command, "--suite", "resnet50")
        assert code == 2 and out == "" and "pip install conv-tools" in err and command in err


def test_a_package_adds_its_subcommands_and_a_broken_one_is_named(capsys, monkeypatch):
    from conv_core import cli

    class Entry:
        def __init__(self, name, add):
            self.name, self.value, self.add = name, f"tests:{name}", add

        def load(self):
            return self.add

    def add_hello(sub):
        sub.add_parser("hello").set_defaults(func=lambda args: print("hello") or 0)

    def broken(sub):
        raise ImportError("needs libfoo")

    monkeypatch.setattr(cli.metadata, "entry_points", lambda group: [Entry("hello", add_hello), Entry("bad", broken)])
    code, out, err = run(capsys, "hello")
    assert code == 0 and out == "hello\n" and "'bad' of tests:bad failed to load: needs libfoo" in err


# ---- check ---------------------------------------------------------------------------------------------


class FakeReport:
    def __init__(self, backend, ok):
        self.backend, self.ok = backend, ok
        self.counts = {"reference": (3, 0 if ok else 1), "coverage": (1, 0)}

    def summary(self):
        return f"conformance of backend {self.backend!r}: {'PASS' if self.ok else 'FAIL'}"


@pytest.fixture
def fake_conformance(monkeypatch):
    """Replace the (slow) conformance run: ``failing`` backends fail, the others pass."""
    from conv_core.testing import conformance

    calls, failing = [], set()

    def run_conformance(backend, device, *, seed=0, **kwargs):
        calls.append((backend, str(device), seed))
        return FakeReport(backend, backend not in failing)

    monkeypatch.setattr(conformance, "run_conformance", run_conformance)
    return calls, failing


def test_check_every_backend(capsys, monkeypatch, fake_conformance):
    calls, failing = fake_conformance
    use_backends(monkeypatch, wrong=wrong_backend())
    code, out, _ = run(capsys, "check", "--device", "cpu")
    assert code == 0 and [c[0] for c in calls] == ["aten", "wrong"]
    assert out.splitlines()[-1] == ("conformance: PASSED: 8 checks of 2 backends (aten, wrong) on cpu: results "
                                    "against the float64 reference, non-contiguous operands, metadata, coverage")
    failing.add("wrong")
    code, out, _ = run(capsys, "check", "--seed", "3", "--device", "cpu")
    assert code == 1 and "conformance: FAILED for wrong: 9 checks of 2 backends" in out
    assert calls[-1] == ("wrong", "cpu", 3)


def test_check_one_backend(capsys, fake_conformance):
    calls, _ = fake_conformance
    assert run(capsys, "check", "--backend", "aten", "--device", "cpu")[0] == 0 and calls == [("aten", "cpu", 0)]
    code, _, err = run(capsys, "check", "--backend", "nosuch")
    assert code == 2 and "no backend named 'nosuch'" in err


# ---- terminal helpers ----------------------------------------------------------------------------------


def test_format_table_aligns_columns():
    text = format_table(("name", "us"), [("a", "1.5"), ("long name", None)], align="lr")
    assert text.splitlines() == ["name        us", "---------  ---", "a          1.5", "long name    -"]
