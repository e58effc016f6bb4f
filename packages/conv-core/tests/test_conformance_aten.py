"""The conformance kit run against the built-in aten backend on the CPU, and the kit's own failure modes.

PyTorch 2.13's CPU convolution runs float32, bfloat16 and float16 in all three
directions. Its float16 *backward* rounds partial sums to float16 (error up to
~17x the bound of a float32-accumulating kernel), which is why the aten backend
computes float16 in float32 on the CPU, and bfloat16 too where oneDNN has no
bfloat16 kernels (``aten.cpu_has_native``); with that, all three dtypes are
checked in all three directions here, and bfloat16 both ways.
"""

import dataclasses
import math
import textwrap

import pytest
import torch

from conv_core import ConvProblem
from conv_core.frontend.call import problem_of_tensors
from conv_core.backends import aten
from conv_core.problem import DIRECTIONS, LAYOUTS
from conv_core.layout import detect_layout, is_dense_in
from conv_core.testing import (ConformanceSuite, Report, check_metadata, edge_problems, random_problems,
                                run_conformance)
from conv_core.testing.conformance import scattered_copy
from conv_core.testing.pytest_plugin import collected

pytest_plugins = ["pytester"]




class TestAten(ConformanceSuite):
    backend = "aten"
    device = "cpu"
    dtypes = ("float32", "float16", "bfloat16")
    layouts = LAYOUTS
    directions = DIRECTIONS
    random_count = 36
    max_macs = 100_000


class TestAtenNativeBfloat16(ConformanceSuite):
    """bfloat16 forwards as PyTorch computes them (the path of a CPU with oneDNN bfloat16 kernels), gradients in
    float32, held to the same model."""
    backend = "aten"
    device = "cpu"
    dtypes = ("bfloat16",)
    layouts = LAYOUTS
    directions = DIRECTIONS
    random_count = 12
    max_macs = 100_000

    @pytest.fixture(autouse=True)
    def native_bfloat16(self, monkeypatch):
        monkeypatch.setattr(aten, "cpu_has_native", lambda dtype: dtype is torch.bfloat16)


@pytest.mark.parametrize("native", [True, False])
def test_a_cpu_bfloat16_call_is_pytorchs_own_where_onednn_has_bfloat16(monkeypatch, native):
    import conv_core
    import torch.nn.functional as F
    from conv_core import engine as engine_module

    monkeypatch.setattr(aten, "cpu_has_native", lambda dtype: native and dtype is torch.bfloat16)
    monkeypatch.setattr(engine_module, "_engine", None)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 6, 6, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 3, 3, generator=g).bfloat16()
    problem = problem_of_tensors(x, w, padding=1)
    engine = conv_core.get_engine()
    for direction in DIRECTIONS:  # the gradients stay in float32 (PyTorch's CPU bf16 ones miss the bound)
        tags = engine.ranking(problem.with_direction(direction), torch.device("cpu")).best.candidate.tags
        assert ("direct" in tags) is (native and direction == "fwd")
    with torch.no_grad():
        y = conv_core.conv2d(x, w, padding=1)
    expected = F.conv2d(x, w, padding=1) if native else F.conv2d(x.float(), w.float(), padding=1).bfloat16()
    torch.testing.assert_close(y, expected, rtol=0, atol=0)


def test_cpu_has_native_answers_for_the_machine():
    assert isinstance(aten.cpu_has_native(torch.bfloat16), bool) and not aten.cpu_has_native(torch.float32)


def test_suite_checks_what_it_claims():
    """The aten suites really cover every direction, dtype, layout and epilogue, with readable ids."""
    found = collected(TestAten)
    problems = [case.problem for case in found.cases]
    assert not found.issues
    assert {(p.direction, p.dtype, p.layout) for p in problems} == {
        (d, t, lay) for d in DIRECTIONS for t in TestAten.dtypes for lay in LAYOUTS}
    assert {p.activation for p in problems} >= {None, "relu", "relu6", "gelu", "gelu_tanh", "silu"}
    assert {p.ndim for p in problems} == {1, 2, 3}
    assert len(found.noncontiguous) == len(DIRECTIONS) * len(TestAten.dtypes) * len(LAYOUTS)
    assert list(found.kernels) == ["aten:native:default"]
    assert found.cases[0].id.startswith("aten.native.default-fwd-n2c4k4-i8x8-f3x3-p1-f32-cf")
    mixed = [p for p in problems if p.out_dtype != p.dtype]
    assert {p.dtype for p in mixed} == {"float16", "bfloat16"} and {p.out_dtype for p in mixed} == {"float32"}


def test_run_conformance_in_plain_python():
    report = run_conformance("aten", "cpu", random_count=3, dtypes=("float32",), layouts=("channels_last",),
                             edge=False)
    assert isinstance(report, Report) and report.ok, report.summary()
    assert set(report.counts) == {"reference", "metadata", "noncontiguous", "coverage"}
    assert report.counts["reference"] == (3, 0)
    assert "PASS" in report.summary()


def test_run_conformance_of_a_missing_backend_fails():
    report = run_conformance("no_such_backend", "cpu", random_count=1)
    assert not report.ok
    assert "not loaded" in report.summary()


# ---- the kit's parts ---------------------------------------------------------------------------------


def test_edge_problems_are_small_and_cover_the_edge_cases():
    problems = edge_problems("cpu", DIRECTIONS, ("float16", "float32"), LAYOUTS)
    assert len(problems) == len(set(problems))
    assert max(p.macs for p in problems) <= 100_000
    fwd = [p for p in problems if p.direction == "fwd"]
    assert {p.activation for p in fwd if p.bias} == {None, "relu", "relu6", "gelu", "gelu_tanh", "silu"}
    assert {(p.dtype, p.out_dtype) for p in fwd if p.out_dtype != p.dtype} == {("float16", "float32")}
    assert all(not p.bias and p.activation is None and p.out_dtype == p.dtype
               for p in problems if p.direction == "bwd_weight")
    transposed = [p for p in problems if p.transposed_epilogue]
    assert {(p.bias, p.activation) for p in transposed} == {(True, "relu"), (True, None), (False, "silu")}
    geometry = {p.geometry_key for p in problems}
    for needed in ("f1x1 ", "s2x2", "d2x2", "p1.0x0.2", "g2 ", "n1 ", "c1 ", "c3 ", "k3 ", "i7x5", "f1x3", "f3x1",
                   "f7x1", "p4.4x4.4"):
        assert any(needed in key + " " for key in geometry), needed
    assert any(p.groups == p.in_channels == p.out_channels > 1 for p in problems)
    assert any(p.output_size == (1, 1) for p in problems)
    assert {p.ndim for p in problems} == {1, 2, 3}


def test_random_problems_are_seeded_valid_bounded_and_spread():
    first = random_problems(3, 40, "cpu", DIRECTIONS, ("float32", "bfloat16"), LAYOUTS, max_macs=20_000)
    assert first == random_problems(3, 40, "cpu", DIRECTIONS, ("float32", "bfloat16"), LAYOUTS, max_macs=20_000)
    assert first != random_problems(4, 40, "cpu", DIRECTIONS, ("float32", "bfloat16"), LAYOUTS, max_macs=20_000)
    assert all(p.macs <= 20_000 for p in first)
    assert {(p.direction, p.dtype, p.layout) for p in first[:12]} == {
        (d, t, lay) for d in DIRECTIONS for t in ("float32", "bfloat16") for lay in LAYOUTS}
    many = random_problems(0, 300, "cpu", ("fwd",), ("float16",), ("channels_first",), max_macs=50_000)
    assert {p.ndim for p in many} == {1, 2, 3}
    assert any(p.groups > 1 for p in many) and any(p.symmetric_padding is None for p in many)
    assert any(max(p.stride) == 3 for p in many) and any(max(p.dilation) == 2 for p in many)
    assert any(p.bias for p in many) and any(p.activation for p in many) and any(p.out_dtype == "float32" for p in many)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 5), (1, 2, 3, 4, 2), (4, 1, 1, 1), (2, 3, 1, 1)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scattered_copy_is_dense_in_no_layout_and_keeps_its_layout(shape, layout):
    t = torch.randn(shape)
    view = scattered_copy(t, layout)
    assert torch.equal(view, t)
    assert not is_dense_in(view, "channels_first") and not is_dense_in(view, "channels_last")
    if shape[1] > 1 and math.prod(shape[2:]) > 1:
        assert detect_layout(view) == layout


def test_metadata_problems_are_found():
    problem = ConvProblem("fwd", 2, 4, 4, (6, 6), (3, 3), 1, 1, 1)
    (good,) = aten.conv_core_candidates(problem, torch.device("cpu"))
    assert check_metadata(problem, good, "cpu") == []
    bad = dataclasses.replace(good, estimate_us=math.inf, tags=frozenset({1}), workspace_bytes=64, error_factor=0.5)
    issues = "\n".join(check_metadata(problem, bad, "cpu"))
    for expected in ("estimate_us=inf", "tags", "error_factor=0.5", "needs_workspace tag is absent"):
        assert expected in issues
    renamed = dataclasses.replace(good, config="renamed")
    assert "not returned again" in "".join(check_metadata(problem, renamed, "cpu"))


# ---- the suite inside pytest: nothing to check fails, wrong kernels fail, a good backend passes --------

INNER_TESTS = textwrap.dedent('''
    import dataclasses
    import functools

    import torch

    import conv_core.engine as engine
    from conv_core import BackendInfo, Candidate, Declined, hookimpl
    from conv_core.backends import aten
    from conv_core.plugins import Registry
    from conv_core.settings import Settings
    from conv_core.testing import ConformanceSuite


    class Plugin:
        """aten's kernel under another name, optionally only forward, optionally rolled by one pixel."""

        def __init__(self, name, forward_only=False, shift=False):
            self.name, self.forward_only, self.shift = name, forward_only, shift

        @hookimpl
        def conv_core_backend_info(self):
            return BackendInfo(self.name, "1.0", ("cpu",))

        @hookimpl
        def conv_core_candidates(self, problem, device):
            if self.forward_only and problem.direction != "fwd":
                return [Declined(self.name, "forward only")]
            (base,) = aten.conv_core_candidates(problem, device)
            run = functools.partial(self.run, base.run) if self.shift else base.run
            return [Candidate(self.name, "k", "c", run, estimate_us=1.0)]

        @staticmethod
        def run(inner, *operands, out=None):
            result = torch.roll(inner(*operands), 1, dims=-1)
            return result if out is None else out.copy_(result)


    class EntryPoint:
        def __init__(self, plugin):
            self.name = self.value = plugin.name
            self.plugin = plugin

        def load(self):
            return self.plugin


    settings = dataclasses.replace(Settings.from_env(), allow=None, block=frozenset(), tuning_db="{db}")
    engine._engine = engine.Engine(settings, Registry(settings, [
        EntryPoint(Plugin("fwdonly", forward_only=True)), EntryPoint(Plugin("shifted", shift=True))]))

    class Small(ConformanceSuite):
        """Three fixed float32 problems, one per direction."""

        device = "cpu"
        dtypes = ("float32",)
        layouts = ("channels_first",)
        edge_cases = False
        random_count = 0
        extra_problems = ("fwd n2 c4 k4 g1 i6x5 f3x3 s1x1 p1.1x1.1 d1x1 f32.f32.f32 cf b0 a- cpu",
                          "bwd_data n1 c2 k4 g2 i9 f3 s2 p1.0 d1 f32.f32.f32 cf b0 a- cpu",
                          "bwd_weight n2 c3 k3 g1 i5x4 f2x2 s1x1 p0.0x1.1 d1x1 f32.f32.f32 cf b0 a- cpu")


    class TestNobody(Small):
        backend = "nobody"


    class TestNoBackendSet(Small):
        pass


    class TestShifted(Small):
        backend = "shifted"


    class TestForwardOnly(Small):
        backend = "fwdonly"


    class TestAtenTiny(Small):
        backend = "aten"
''')


@pytest.fixture
def inner_run(pytester, monkeypatch, tmp_path):
    """Run INNER_TESTS in a nested pytest session; {class name: {test name: [outcomes]}}."""
    import conv_core.engine

    monkeypatch.setattr(conv_core.engine, "_engine", None)  # the inner module installs its own engine
    pytester.makepyfile(test_inner=INNER_TESTS.replace("{db}", str(tmp_path / "tuning.json")))
    recorder = pytester.inline_run("-q", "-p", "no:cacheprovider")
    outcomes = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        if report.when == "call" or report.outcome != "passed":
            _, cls, test = report.nodeid.split("::")
            outcomes.setdefault(cls, {}).setdefault(test.split("[")[0], []).append(report.outcome)
    return outcomes


def test_suite_inside_pytest(inner_run):
    every_test = {"test_matches_reference", "test_noncontiguous_input", "test_metadata", "test_coverage"}
    # Nothing to check: every test fails, none passes or is skipped.
    for cls in ("TestNobody", "TestNoBackendSet"):
        assert set(inner_run[cls]) == every_test
        assert {o for outcomes in inner_run[cls].values() for o in outcomes} == {"failed"}, inner_run[cls]
    # Wrong results fail, metadata and coverage are fine.
    shifted = inner_run["TestShifted"]
    assert shifted["test_matches_reference"] == ["failed"] * 3
    assert shifted["test_noncontiguous_input"] == ["failed"] * 3
    assert shifted["test_metadata"] == ["passed"] and shifted["test_coverage"] == ["passed"]
    # A backend that returns nothing for two declared directions fails coverage only.
    forward_only = inner_run["TestForwardOnly"]
    assert forward_only["test_coverage"] == ["failed"]
    assert forward_only["test_matches_reference"] == ["passed"]
    # A correct backend passes everything.
    assert {o for outcomes in inner_run["TestAtenTiny"].values() for o in outcomes} == {"passed"}
    assert inner_run["TestAtenTiny"]["test_matches_reference"] == ["passed"] * 3


def test_plugin_import_is_inert():
    """The pytest11 entry point imports neither torch nor conv_core; the suite module loads no engine."""
    import importlib
    import subprocess
    import sys

    code = ("import sys, conv_core_pytest; assert 'torch' not in sys.modules and 'conv_core' not in sys.modules; "
            "import conv_core.engine as e, conv_core.testing.pytest_plugin as p; "
            "assert e._engine is None; assert 'conv_core.testing.conformance' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
    assert importlib.import_module("conv_core.testing").ConformanceSuite is ConformanceSuite
