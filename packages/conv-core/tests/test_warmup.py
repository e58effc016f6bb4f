"""``conv-core warmup``: each problem of a model (or of the shapes given) run once through its first-ranked
candidate."""

import sys

import pytest
import torch

from conv_core import warmup
from conv_core.cli import main
from conv_core.engine import Engine
from conv_core.problem import ConvProblem
from conv_core.shapes import problems_from_shape
from conv_core.testing.fakes import isolate, use_backends

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def aten_only(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)
    return use_backends(monkeypatch)


#: Two layers of different shapes and a third with the first one's: three layers, two problems.
SHAPES = ("n2 c4 k8 i6x6 f3 p1", "n2 c8 k4 i5x5 f1 p0", "n2 c4 k8 i6x6 f3 p1")


@pytest.fixture
def tiny_shapes():
    return SHAPES


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


def _problems(shapes):
    return [(f"conv{i + 1}", p) for i, shape in enumerate(shapes)
            for _, p in problems_from_shape(shape, dtype="float32", layout="channels_first", arch="cpu")]


def test_each_distinct_problem_runs_once_in_each_direction(tiny_shapes, executed):
    done = warmup.warmup(_problems(tiny_shapes), CPU, directions=("fwd", "bwd_data", "bwd_weight"))
    assert [(w.name, w.problem.direction) for w in done] == [
        (name, d) for name in ("conv1", "conv2") for d in ("fwd", "bwd_data", "bwd_weight")]
    assert [problem for problem, _ in executed] == [w.problem for w in done]
    for problem, shapes in executed:
        assert shapes == tuple(tuple(s) for s in problem.operand_shapes)
    assert all(w.kernel_id.startswith("aten:") and w.seconds >= 0 for w in done)


def test_the_kernel_reported_is_the_one_the_engine_ranks_first(tiny_shapes, aten_only):
    done = warmup.warmup(_problems(tiny_shapes), CPU)
    assert [w.kernel_id for w in done] == [aten_only.ranking(w.problem, CPU).best.kernel_id for w in done]
    assert {w.problem.direction for w in done} == {"fwd"}


def test_unknown_directions_are_refused(tiny_shapes):
    with pytest.raises(ValueError, match="sideways"):
        warmup.warmup(_problems(tiny_shapes), CPU, directions=("fwd", "sideways"))


def test_in_directions_keeps_the_first_layer_of_a_shared_problem():
    p = ConvProblem("fwd", 2, 4, 8, (6, 6), 3, 1, 1, 1)
    q = p.replace(out_channels=4)
    assert warmup.in_directions([("a", p), ("b", q), ("c", p)], ("fwd", "bwd_weight")) == [
        ("a", p), ("a", p.with_direction("bwd_weight")), ("b", q), ("b", q.with_direction("bwd_weight"))]


def test_the_command_warms_up_shapes_for_training(capsys, tiny_shapes, executed):
    shapes = [word for shape in tiny_shapes for word in ("--shape", shape)]
    code = main(["warmup", *shapes, "--train", "--dtype", "fp32", "--layout", "nchw", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert len(executed) == 6 and "6 problems warmed up" in out
    assert out.count("aten:") == 6


@pytest.mark.parametrize("argv, message", [
    (["--shape", "n2 c4 q9"], "cannot read 'q9'"),
    (["--model", "resnet50"], "needs torchvision"),
])
def test_usage_errors_exit_2(capsys, monkeypatch, argv, message):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as on CI: not installed
    assert main(["warmup", *argv, "--device", "cpu"]) == 2
    assert message in capsys.readouterr().err


def test_a_transposed_layer_warms_up_the_problem_its_forward_runs(executed):
    """A transposed layer's forward is its convolution's bwd_data: that is the kernel to compile."""
    conv = ConvProblem("fwd", 2, 4, 6, (8, 8), (2, 2), (2, 2), 0, 1, dtype="float32", layout="channels_first")
    done = warmup.warmup([("up", conv)], CPU, transposed={"up"})
    assert [problem.direction for problem, _ in executed] == ["bwd_data"] == [w.problem.direction for w in done]
    assert warmup.in_directions([("up", conv)], ("fwd", "bwd_data"), transposed={"up"}) == [
        ("up", conv.with_direction("bwd_data")), ("up", conv)]
