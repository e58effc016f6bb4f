"""``conv-core warmup``: each problem of a suite (or model) run once through its first-ranked candidate."""

import sys

import pytest
import torch

from conv_core import warmup
from conv_core.cli import main
from conv_core.engine import Engine
from conv_core.problem import ConvProblem
from fake_backends import write_suite
from test_bench_tune import isolate, use_backends

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def aten_only(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)
    return use_backends(monkeypatch)


@pytest.fixture
def tiny_suite(tmp_path):
    """Two layers of different shapes and a third with the first one's: three layers, two problems."""
    return write_suite(tmp_path / "tiny.json", [("conv1", 4, 8, 6, 3, 1), ("conv2", 8, 4, 5, 1, 0),
                                                ("conv3", 4, 8, 6, 3, 1)])


@pytest.fixture
def executed(monkeypatch):
    """The (problem, operand shapes) of every call of Engine.execute."""
    calls = []
    original = Engine.execute

    def spy(self, ranking, operands, out=None):
        calls.append((ranking.problem, tuple(tuple(t.shape) for t in operands if t is not None)))
        return original(self, ranking, operands, out)

    monkeypatch.setattr(Engine, "execute", spy)
    return calls


def _problems(suite):
    return warmup.suite_problems(suite, batch=None, dtype="float32", layout="channels_first", arch="cpu")


def test_each_distinct_problem_runs_once_in_each_direction(tiny_suite, executed):
    done = warmup.warmup(_problems(tiny_suite), CPU, directions=("fwd", "bwd_data", "bwd_weight"))
    assert [(w.name, w.problem.direction) for w in done] == [
        (name, d) for name in ("conv1", "conv2") for d in ("fwd", "bwd_data", "bwd_weight")]
    assert [problem for problem, _ in executed] == [w.problem for w in done]
    for problem, shapes in executed:
        assert shapes == tuple(tuple(s) for s in problem.operand_shapes)
    assert all(w.kernel_id.startswith("aten:") and w.seconds >= 0 for w in done)


def test_the_kernel_reported_is_the_one_the_engine_ranks_first(tiny_suite, aten_only):
    done = warmup.warmup(_problems(tiny_suite), CPU)
    assert [w.kernel_id for w in done] == [aten_only.ranking(w.problem, CPU).best.kernel_id for w in done]
    assert {w.problem.direction for w in done} == {"fwd"}


def test_unknown_directions_are_refused(tiny_suite):
    with pytest.raises(ValueError, match="sideways"):
        warmup.warmup(_problems(tiny_suite), CPU, directions=("fwd", "sideways"))


def test_in_directions_keeps_the_first_layer_of_a_shared_problem():
    p = ConvProblem("fwd", 2, 4, 8, (6, 6), 3, 1, 1, 1)
    q = p.replace(out_channels=4)
    assert warmup.in_directions([("a", p), ("b", q), ("c", p)], ("fwd", "bwd_weight")) == [
        ("a", p), ("a", p.with_direction("bwd_weight")), ("b", q), ("b", q.with_direction("bwd_weight"))]


def test_the_command_warms_up_a_suite_for_training(capsys, tiny_suite, executed):
    code = main(["warmup", "--suite", tiny_suite, "--train", "--dtype", "fp32", "--layout", "nchw", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert len(executed) == 6 and "6 problems warmed up" in out
    assert out.count("aten:") == 6


@pytest.mark.parametrize("argv, message", [
    (["--suite", "no-such-suite"], "no-such-suite"),
    (["--model", "resnet50"], "needs torchvision"),
])
def test_usage_errors_exit_2(capsys, monkeypatch, argv, message):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as on CI: not installed
    assert main(["warmup", *argv, "--device", "cpu"]) == 2
    assert message in capsys.readouterr().err


def test_a_transposed_layer_warms_up_the_problem_its_forward_runs(capsys, tmp_path, executed):
    """A transposed layer's forward is its convolution's bwd_data: that is the kernel to compile."""
    import json

    from conv_core.suites import Suite, SuiteLayer

    up = SuiteLayer("up", 4, 6, (8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), transposed=True)
    path = tmp_path / "dec.json"
    path.write_text(json.dumps(Suite("dec", "test", (up,), default_batch=2).to_json()))
    code = main(["warmup", "--suite", str(path), "--dtype", "fp32", "--layout", "nchw", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and "fwd (transposed)" in out
    assert [problem.direction for problem, _ in executed] == ["bwd_data"]
    assert warmup.in_directions([("up", up.problem(2))], ("fwd", "bwd_data"), transposed={"up"}) == [
        ("up", up.problem(2, direction="fwd")), ("up", up.problem(2, direction="bwd_data"))]
