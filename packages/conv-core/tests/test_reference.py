"""The float64 references and the tolerance model: correct where it must be, and able to fail.

The conformance kit is only as good as these two things: the reference must be
the convolution (checked against PyTorch's float64 convolution and its
autograd), and the tolerance must accept what a correct kernel produces
(PyTorch's own fp32/bf16/fp16 results) while rejecting plausible bugs (the
"mutant" candidates below, each of which must fail ``check_candidate``).
"""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from conv_core import Candidate, ConvProblem
from conv_core import reference as R
from conv_core.backends import aten
from conv_core.problem import LAYOUTS, torch_dtype
from conv_core.layout import empty_strided_for, is_dense_in
from conv_core.testing import check_candidate, edge_problems, random_problems

CPU = torch.device("cpu")
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}




def problem(direction="fwd", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=4, out_channels=6, input_size=(7, 6), filter_size=(3, 3), stride=1,
                padding=((1, 0), (0, 2)), dilation=1, groups=2)
    return ConvProblem(direction="fwd", **{**base, **fields}).with_direction(direction)


#: Forward geometries for the reference checks: every edge case and some random ones, in float64.
GEOMETRIES = [p for p in edge_problems("cpu", ("fwd",), ("float64",), ("channels_first",)) if not p.bias] + \
    random_problems(seed=7, count=12, directions=("fwd",), dtypes=("float64",), layouts=("channels_first",))


def geometry_id(p: ConvProblem) -> str:
    return p.geometry_key.replace(" ", "-")


# ---- the reference is the convolution --------------------------------------------------------------


@pytest.mark.parametrize("p", GEOMETRIES, ids=geometry_id)
def test_explicit_forward_equals_torch_float64(p):
    x, w, _ = R.random_operands(p.replace(bias=False, activation=None), CPU, seed=1)
    explicit = R.conv_forward64(x, w, p, method="explicit")
    torch.testing.assert_close(explicit, R.conv_forward64(x, w, p, method="torch"), rtol=1e-12, atol=1e-12)
    assert explicit.shape == p.output_shape


def test_geometries_cover_what_they_should():
    """The forward checks above really include groups, dilation, strides, asymmetric padding, 1D and 3D."""
    assert any(p.groups > 1 for p in GEOMETRIES) and any(p.groups == p.in_channels > 1 for p in GEOMETRIES)
    assert any(max(p.dilation) > 1 for p in GEOMETRIES) and any(max(p.stride) > 1 for p in GEOMETRIES)
    assert any(p.symmetric_padding is None for p in GEOMETRIES)
    assert {p.ndim for p in GEOMETRIES} == {1, 2, 3}


def torch_gradients(p: ConvProblem, x, w, dy):
    """(dx, dw) of ``F.convNd`` on the explicitly padded input, by autograd, in float64."""
    x = x.double().requires_grad_(True)
    w = w.double().requires_grad_(True)
    pads = [v for pair in reversed(p.padding) for v in pair]
    y = TORCH_CONV[p.ndim](F.pad(x, pads), w, None, p.stride, 0, p.dilation, p.groups)
    return torch.autograd.grad(y, (x, w), dy.double())


@pytest.mark.parametrize("p", GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("method", ["explicit", "torch"])
def test_backward_references_equal_torch_autograd(p, method):
    x, w, _ = R.random_operands(p.replace(bias=False, activation=None), CPU, seed=2)
    dy = torch.randn(p.output_shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    dx, dw = torch_gradients(p, x, w, dy)
    torch.testing.assert_close(R.reference(p.with_direction("bwd_data"), (dy, w), method), dx,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(R.reference(p.with_direction("bwd_weight"), (x, dy), method), dw,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [p for p in GEOMETRIES if p.symmetric_padding is not None], ids=geometry_id)
def test_backward_references_equal_aten_convolution_backward(p):
    x, w, _ = R.random_operands(p.replace(bias=False, activation=None), CPU, seed=4)
    dy = torch.randn(p.output_shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    dx, dw, _ = torch.ops.aten.convolution_backward(
        dy, x.double(), w.double(), None, p.stride, p.symmetric_padding, p.dilation, False, [0] * p.ndim,
        p.groups, [True, True, False])
    torch.testing.assert_close(R.reference(p.with_direction("bwd_data"), (dy, w)), dx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(R.reference(p.with_direction("bwd_weight"), (x, dy)), dw, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("activation", [None, "relu", "relu6", "gelu", "gelu_tanh", "silu"])
def test_forward_epilogue_is_bias_then_activation(activation):
    p = problem(bias=True, activation=activation, dtype="float64")
    x, w, b = R.random_operands(p, CPU, seed=6)
    y = F.conv2d(F.pad(x, (0, 2, 1, 0)), w, b, groups=2)
    expected = {None: y, "relu": F.relu(y), "relu6": F.relu6(y), "gelu": F.gelu(y),
                "gelu_tanh": F.gelu(y, approximate="tanh"), "silu": F.silu(y)}[activation]
    torch.testing.assert_close(R.reference(p, (x, w, b)), expected, rtol=1e-12, atol=1e-12)


def test_large_problems_use_torch_and_agree(monkeypatch):
    p = problem()
    x, w, _ = R.random_operands(p, CPU, seed=8)
    explicit = R.reference(p, (x, w, None))
    monkeypatch.setattr(R, "EXPLICIT_LIMIT", 0)
    torch.testing.assert_close(R.reference(p, (x, w, None)), explicit, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_random_operands_are_dense_nonzero_and_order_one(direction, layout):
    p = problem(direction, layout=layout, dtype="float16", in_channels=32, out_channels=32, groups=1)
    operands = R.random_operands(p, CPU, seed=0)
    assert all(is_dense_in(t, layout) for t in operands[:2])
    assert all((t != 0).all() for t in operands if t is not None)
    result = R.reference(p, operands)
    assert 0.3 < float(result.std()) < 3, "results of order 1: no fp16 overflow, no underflow"


# ---- the tolerance accepts correct low-precision results -----------------------------------------


#: Problems with long reductions, where accumulated rounding is largest.
LONG_REDUCTIONS = [
    problem(in_channels=128, out_channels=16, groups=1, input_size=(6, 6)),  # fwd/bwd_weight L = 1152
    problem(in_channels=16, out_channels=256, groups=1, input_size=(5, 5), padding=1),  # bwd_data L = 2304
    problem(batch=4, in_channels=4, out_channels=4, groups=1, input_size=(24, 24), padding=1),  # bwd_weight L=2304
]

@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("index", range(len(LONG_REDUCTIONS)))
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_tolerance_accepts_aten_on_long_reductions(dtype, direction, index, layout):
    p = LONG_REDUCTIONS[index].replace(dtype=dtype, weight_dtype="", out_dtype="", layout=layout)
    p = p.with_direction(direction)
    (candidate,) = aten.conv_core_candidates(p, CPU)
    comparison = check_candidate(p, candidate, CPU, seed=index)
    assert comparison.ok, comparison.message


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("activation", ["relu", "relu6", "gelu", "gelu_tanh", "silu"])
def test_tolerance_accepts_activation_after_rounding(dtype, activation):
    """PyTorch rounds conv + bias to the output dtype, then applies the activation: the model allows that."""
    p = problem(dtype=dtype, bias=True, activation=activation, in_channels=32, out_channels=64, input_size=(9, 9))
    (candidate,) = aten.conv_core_candidates(p, CPU)
    comparison = check_candidate(p, candidate, CPU)
    assert comparison.ok, comparison.message


# ---- candidates built on the reference, correct and mutated ------------------------------------------


def finish(p: ConvProblem, value: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``value`` rounded into ``out`` (or a new dense tensor in the problem's layout)."""
    target = p.empty_result(value.device) if out is None else out
    target.copy_(value)
    return target


def exact_value(p: ConvProblem, a, b, bias=None) -> torch.Tensor:
    return R.reference(p, (a, b, bias) if p.direction == "fwd" else (a, b))


def candidate(run, name="exact", tags=("deterministic",), error_factor=1.0) -> Candidate:
    return Candidate("test", name, "c", run=run, estimate_us=1.0, tags=frozenset(tags), error_factor=error_factor)


def exact(p: ConvProblem, **kwargs) -> Candidate:
    """The float64 reference rounded once to the result dtype: the most accurate kernel possible."""
    def run(a, b, bias=None, *, out=None):
        return finish(p, exact_value(p, a, b, bias), out)

    return candidate(run, **kwargs)


def transformed(p: ConvProblem, change, name: str) -> Candidate:
    """A kernel whose float64 result goes through ``change(value) -> value`` before rounding."""
    def run(a, b, bias=None, *, out=None):
        return finish(p, change(exact_value(p, a, b, bias)), out)

    return candidate(run, name)


def channel_dim(p: ConvProblem) -> int:
    return 0 if p.direction == "bwd_weight" else 1


def shifted(p):
    return transformed(p, lambda v: torch.roll(v, 1, dims=-1), "pixel_shift")


def swapped_channels(p):
    def swap(v):
        v = v.clone()
        index = [slice(None)] * v.dim()
        first, second = list(index), list(index)
        first[channel_dim(p)], second[channel_dim(p)] = 0, 1
        v[tuple(first)], v[tuple(second)] = v[tuple(second)].clone(), v[tuple(first)].clone()
        return v

    return transformed(p, swap, "swapped_channels")


def noisy(p):
    gen = torch.Generator().manual_seed(0)
    return transformed(p, lambda v: v * (1 + 1e-2 * torch.randn(v.shape, generator=gen, dtype=v.dtype)), "noise")


def one_unwritten(p):
    """Writes every element of ``out`` but the last one."""
    def run(a, b, bias=None, *, out=None):
        full = finish(p, exact_value(p, a, b, bias), None)
        if out is None:
            return full
        keep = torch.zeros(full.shape, dtype=torch.bool)
        keep[tuple(s - 1 for s in full.shape)] = True
        out.copy_(torch.where(keep, out, full))
        return out

    return candidate(run, "one_unwritten")


def drops_bias(p):
    return candidate(lambda a, b, bias=None, *, out=None: finish(p, exact_value(p, a, b, None), out), "no_bias")


#: Each activation and a wrong one it could be mistaken for (relu6 vs relu only differ above 6, rare here).
WRONG_ACTIVATION = {"relu": "silu", "relu6": None, "silu": "gelu", "gelu": "gelu_tanh", "gelu_tanh": "gelu"}


def wrong_activation(p):
    wrong = p.replace(activation=WRONG_ACTIVATION[p.activation])
    return candidate(lambda a, b, bias=None, *, out=None: finish(p, exact_value(wrong, a, b, bias), out),
                     "wrong_activation")


def reduced_precision(p):
    """Rounds float32 operands to bfloat16: a kernel using the wrong matrix instruction."""
    def run(a, b, bias=None, *, out=None):
        return finish(p, exact_value(p, a.bfloat16(), b.bfloat16(), bias), out)

    return candidate(run, "bf16_inside")


def ignores_out(p):
    return candidate(lambda a, b, bias=None, *, out=None: finish(p, exact_value(p, a, b, bias), None), "new_result")


def wrong_dtype(p):
    return candidate(lambda a, b, bias=None, *, out=None: exact_value(p, a, b, bias) if out is None else
                     finish(p, exact_value(p, a, b, bias), out), "float64_result")


def wrong_layout(p):
    other = "channels_first" if p.layout == "channels_last" else "channels_last"

    def run(a, b, bias=None, *, out=None):
        if out is None:
            out = empty_strided_for(p.result_shape, torch_dtype(p.result_dtype), other, a.device)
        return finish(p, exact_value(p, a, b, bias), out)

    return candidate(run, "other_layout")


def modifies_input(p):
    def run(a, b, bias=None, *, out=None):
        result = finish(p, exact_value(p, a, b, bias), out)
        a.mul_(2)
        return result

    return candidate(run, "writes_input")


def not_deterministic(p):
    """Tagged deterministic, but the first call's result is one ulp off in one element (within tolerance)."""
    calls = []

    def run(a, b, bias=None, *, out=None):
        result = finish(p, exact_value(p, a, b, bias), out)
        if not calls:
            first = (0,) * result.dim()
            result[first] = torch.nextafter(result[first], torch.tensor(math.inf, dtype=result.dtype))
        calls.append(1)
        return result

    return candidate(run, "flaky")


def half_accumulation(p):
    """Accumulates the input channels' contributions in the (half) result dtype: the classic low-precision bug."""
    one_channel = p.replace(in_channels=1, groups=1)

    def run(a, b, bias=None, *, out=None):
        acc = torch.zeros(p.output_shape, dtype=torch_dtype(p.result_dtype))
        for c in range(p.in_channels):
            part = R.conv_forward64(a[:, c:c + 1], b[:, c:c + 1], one_channel)
            acc = (acc.double() + part).to(acc.dtype)
        return finish(p, acc, out)

    return candidate(run, "half_accumulation")


def raises(p):
    def run(a, b, bias=None, *, out=None):
        raise RuntimeError("kernel launch failed")

    return candidate(run, "raises")


def p_fwd_epilogue(**fields):
    return problem(bias=True, activation="silu", **fields)


#: Problems every mutant is tried on: a 2D grouped conv with asymmetric padding and a 1D strided dilated
#: one, in each direction, dtype and layout (forward with bias and an activation).
def mutant_problems(dtypes=("float32", "bfloat16", "float16"), directions=("fwd", "bwd_data", "bwd_weight"),
                    activation="silu"):
    geometries = [dict(), dict(input_size=(15,), filter_size=(5,), stride=2, dilation=2, padding=((3, 1),))]
    problems = []
    for g, dtype, layout, direction in itertools.product(geometries, dtypes, ("channels_first", "channels_last"),
                                                         directions):
        fwd = problem(dtype=dtype, layout=layout, bias=True, activation=activation, **g)
        problems.append(fwd.with_direction(direction))
    return problems


def pid(p: ConvProblem) -> str:
    return p.key.replace(" ", "-")


@pytest.mark.parametrize("p", mutant_problems(), ids=pid)
def test_exact_candidate_passes(p):
    """The control: the unmutated kernel the mutants start from passes every problem they are tried on."""
    comparison = check_candidate(p, exact(p), CPU)
    assert comparison.ok, comparison.message
    assert comparison.worst_ratio <= 0.5


#: Mutant name -> (candidate factory, problems it is tried on, what the failure message must say).
MUTANTS = {
    "pixel_shift": (shifted, mutant_problems(), "MISMATCH"),
    "swapped_channels": (swapped_channels, mutant_problems(), "MISMATCH"),
    "one_unwritten": (one_unwritten, mutant_problems(), "(out=poisoned)"),
    "noise_1e-2": (noisy, mutant_problems(dtypes=("float32", "float16")), "MISMATCH"),
    "drops_bias": (drops_bias, mutant_problems(directions=("fwd",)), "MISMATCH"),
    "reduced_precision": (reduced_precision, mutant_problems(dtypes=("float32",)), "MISMATCH"),
    "ignores_out": (ignores_out, mutant_problems(), "did not return out itself"),
    "wrong_dtype": (wrong_dtype, mutant_problems(), "result dtype torch.float64"),
    "wrong_layout": (wrong_layout, mutant_problems(), "is not dense in"),
    "modifies_input": (modifies_input, mutant_problems(), "modified its first operand"),
    "not_deterministic": (not_deterministic, mutant_problems(dtypes=("float32",)), "tagged deterministic"),
    "raises": (raises, mutant_problems(dtypes=("float32",)), "raised RuntimeError: kernel launch failed"),
    "half_accumulation": (half_accumulation, [problem(dtype=dtype, layout=layout, groups=1, in_channels=32)
                                              for dtype in ("float16", "bfloat16") for layout in LAYOUTS], "MISMATCH"),
    **{f"wrong_activation_{act}": (wrong_activation, mutant_problems(
        dtypes=("float32",) if act.startswith("gelu") else ("float32", "bfloat16", "float16"),
        directions=("fwd",), activation=act), "MISMATCH") for act in WRONG_ACTIVATION},
}


@pytest.mark.parametrize("name,make,p,why", [pytest.param(name, make, p, why, id=f"{name}-{pid(p)}")
                                             for name, (make, problems, why) in MUTANTS.items() for p in problems])
def test_mutant_fails(name, make, p, why):
    comparison = check_candidate(p, make(p), CPU)
    assert not comparison.ok, f"mutant {name} was accepted: {comparison.message}"
    assert why in comparison.message and p.key in comparison.message and f"test:{make(p).kernel}:c" in \
        comparison.message


def test_unwritten_element_is_the_nan_found():
    p = problem()
    comparison = check_candidate(p, one_unwritten(p), CPU)
    assert comparison.nan_elements == 1 and comparison.bad_elements == 1


def test_flaky_candidate_passes_without_deterministic_tag():
    p = problem()
    flaky = not_deterministic(p)
    comparison = check_candidate(p, candidate(flaky.run, tags=()), CPU)
    assert comparison.ok, comparison.message


# ---- tf32 and error_factor widen the tolerance by what they claim, and no more -----------------------


def tf32_round(t: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to tf32's 10 mantissa bits (round to nearest, ties away)."""
    bits = t.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).reshape(t.shape)


def tf32_kernel(p, tags):
    def run(a, b, bias=None, *, out=None):
        return finish(p, exact_value(p, tf32_round(a), tf32_round(b), bias), out)

    return candidate(run, "tf32", tags=tags)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_tf32_rounding_needs_the_tf32_tag(direction):
    p = problem(direction, bias=False, activation=None, groups=1, in_channels=8)
    assert check_candidate(p, tf32_kernel(p, ("tf32",)), CPU).ok
    assert not check_candidate(p, tf32_kernel(p, ()), CPU).ok


def error_factor_kernel(p, factor):
    """Errs by ``(4 sqrt(L) + 8) u absref``: beyond the plain bound, within the bound for error_factor >= 4."""
    def run(a, b, bias=None, *, out=None):
        ops = (a, b, bias) if p.direction == "fwd" else (a, b)
        err = (4 * math.sqrt(p.reduction_length) + 8) * R.UNIT_ROUNDOFF[p.dtype] * R.absolute_reference(p, ops)
        return finish(p, exact_value(p, a, b, bias) + err, out)

    return candidate(run, "winograd", error_factor=factor)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_error_factor_widens_the_bound(direction):
    p = problem(direction, bias=False, activation=None)
    assert not check_candidate(p, error_factor_kernel(p, 1.0), CPU).ok
    assert not check_candidate(p, error_factor_kernel(p, 2.0), CPU).ok
    assert check_candidate(p, error_factor_kernel(p, 5.0), CPU).ok


def test_tolerance_terms():
    """The bound is 2 u_out |ref| + 4 sqrt(L) u_acc absref + floor, per element."""
    p = problem(dtype="bfloat16", groups=1)
    ref, absref = torch.tensor([1.0, -2.0, 0.0]), torch.tensor([3.0, 4.0, 0.0])
    bound = R.tolerance(p, ref, absref)
    u, inner = 2.0**-8, 4 * math.sqrt(p.reduction_length) * 2.0**-24
    expected = torch.tensor([2 * u * 1 + inner * 3, 2 * u * 2 + inner * 4, 0.0]) + torch.finfo(torch.bfloat16).tiny
    torch.testing.assert_close(bound, expected, rtol=1e-6, atol=0)


def test_compare_rejects_wrong_shape_and_nan():
    p = problem()
    operands = R.random_operands(p, CPU)
    value = R.reference(p, operands).float()
    assert R.compare(p, value, operands).ok
    assert not R.compare(p, value[:, :, :-1], operands).ok
    value[0, 0, 0, 0] = math.nan
    result = R.compare(p, value, operands)
    assert not result.ok and result.nan_elements == 1 and result.bad_elements == 1


def test_needed_error_factor_measures_what_the_tolerance_leaves_over():
    """A correctly rounded result needs no factor; an error of 6 u absref needs about 3 (the bound's ``2 E u``)."""
    problem = ConvProblem("fwd", 2, 8, 4, (6, 5), 3, 1, 1, 1, dtype="bfloat16")
    u = R.UNIT_ROUNDOFF["bfloat16"]

    def rounded(*operands):
        return R.reference(problem, operands).to(torch.bfloat16)

    def off(*operands):
        return R.reference(problem, operands) + 6 * u * R.absolute_reference(problem, operands)

    assert R.needed_error_factor(problem, rounded, CPU, range(2))[0] == 0.0
    worst, raw = R.needed_error_factor(problem, off, CPU, range(2))
    assert 2.5 < worst <= 3.0 and raw == pytest.approx(6.0)
