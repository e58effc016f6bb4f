"""ConvProblem: geometry, validation, keys, and building one from a call."""

import pytest
import torch

from conv_core import ConvProblem
from conv_core.frontend.call import problem_of_tensors
from conv_core.layout import detect_layout, is_dense_in, to_layout


def make(**changes):
    fields = dict(direction="fwd", batch=2, in_channels=8, out_channels=16, input_size=(9, 7), filter_size=(3, 3),
                  stride=(2, 1), padding=((1, 0), (2, 2)), dilation=(1, 2), groups=2, dtype="bfloat16",
                  layout="channels_last", bias=True, activation="relu", arch="sm_90")
    fields.update(changes)
    return ConvProblem(**fields)


def test_output_size_matches_torch():
    p = make()
    x = torch.randn(p.input_shape)
    w = torch.randn(p.weight_shape)
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (2, 2, 1, 0)), w, None, p.stride, 0, p.dilation,
                                   p.groups)
    assert p.output_shape == tuple(y.shape)


def test_key_round_trips_and_is_stable():
    p = make()
    assert ConvProblem.from_key(p.key) == p
    assert hash(ConvProblem.from_key(p.key)) == hash(p)
    assert p.key == ("fwd n2 c8 k16 g2 i9x7 f3x3 s2x1 p1.0x2.2 d1x2 bf16.bf16.bf16 cl b1 arelu sm_90")


def test_ints_broadcast_to_every_dimension():
    p = ConvProblem("fwd", 1, 4, 4, (8, 8, 8), 3, 2, 1, 1)
    assert p.filter_size == (3, 3, 3) and p.stride == (2, 2, 2) and p.padding == ((1, 1),) * 3


def test_flops_and_bytes():
    p = make(bias=False, activation=None, groups=1, padding=0, stride=1, dilation=1, input_size=(8, 8))
    assert p.output_size == (6, 6)
    assert p.flops == 2 * 2 * 16 * 36 * 8 * 9
    x, w, y = 2 * 8 * 64, 16 * 8 * 9, 2 * 16 * 36
    assert p.min_bytes == 2 * (x + w + y)


def test_backward_directions_share_geometry():
    p = make(dtype="float16", out_dtype="float32")
    d = p.with_direction("bwd_data")
    assert d.result_shape == p.input_shape and d.operand_shapes == (p.output_shape, p.weight_shape)
    assert not d.bias and d.activation is None and d.out_dtype == "float16"
    w = p.with_direction("bwd_weight")
    assert w.result_shape == p.weight_shape and w.macs == p.macs


@pytest.mark.parametrize("changes, field", [
    (dict(in_channels=9), "in_channels"),
    (dict(out_channels=15), "out_channels"),
    (dict(padding=-1), "padding"),
    (dict(input_size=(2, 2), padding=0, dilation=3), "output_size"),
    (dict(stride=0), "stride"),
    (dict(groups=0), "groups"),
    (dict(layout="nchw"), "layout"),
    (dict(direction="backward"), "direction"),
    (dict(dtype="int8"), "dtype"),
    (dict(activation="tanh"), "activation"),
    (dict(direction="bwd_weight"), "direction"),  # an epilogue on a weight gradient
])
def test_invalid_problems_name_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        make(**changes)


def test_a_data_gradient_may_carry_a_transposed_convolutions_epilogue():
    p = make(direction="bwd_data")
    assert p.transposed_epilogue and p.result_shape[1] == p.in_channels
    assert p.min_bytes - p.replace(bias=False).min_bytes == p.in_channels * 2  # bf16 bias per channel of dx
    assert not make().transposed_epilogue and not p.replace(bias=False, activation=None).transposed_epilogue
    assert not p.with_direction("bwd_weight").bias  # the other directions drop it


def test_from_tensors_reads_the_call():
    x = torch.randn(2, 6, 10, 12).to(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 2)
    p = problem_of_tensors(x, w, torch.randn(4), padding="same", groups=2, activation="silu")
    assert p.layout == "channels_last" and p.arch == "cpu" and p.bias and p.activation == "silu"
    assert p.padding == ((1, 1), (0, 1))  # "same" puts the odd element on the right, as torch does
    assert p.output_size == (10, 12)


def test_same_padding_needs_stride_one():
    with pytest.raises(ValueError, match="stride"):
        problem_of_tensors(torch.randn(1, 2, 8, 8), torch.randn(2, 2, 3, 3), stride=2, padding="same")


@pytest.mark.parametrize("x, w, groups, message", [
    (torch.randn(1, 4, 8, 8), torch.randn(2, 3, 3, 3), 1, "channels"),
    (torch.randn(4, 8, 8), torch.randn(2, 4, 3, 3), 1, "rank"),
    (torch.randn(1, 4, 8, 8), torch.randn(2, 4, 3, 3).to(torch.int32), 1, "dtype"),
    (torch.randn(1, 4, 0, 8), torch.randn(2, 4, 3, 3), 1, "zero-size"),
    (torch.randn(1, 4, 8, 8), torch.randn(3, 2, 3, 3), 2, "out_channels"),
])
def test_bad_calls_get_clear_errors(x, w, groups, message):
    with pytest.raises(ValueError, match=message):
        problem_of_tensors(x, w, groups=groups)


def test_layout_detection_and_conversion():
    x = torch.randn(2, 3, 4, 5)
    assert detect_layout(x) == "channels_first"
    cl = x.to(memory_format=torch.channels_last)
    assert detect_layout(cl) == "channels_last"
    assert detect_layout(cl[:, :, :, 1:]) == "channels_last"  # a view keeps its channel-fastest order
    x1d = torch.randn(2, 5, 7).transpose(1, 2).contiguous().transpose(1, 2)
    assert detect_layout(x1d) == "channels_last"
    dense = to_layout(cl[:, :, :, 1:], "channels_last")
    assert is_dense_in(dense, "channels_last") and torch.equal(dense, cl[:, :, :, 1:])
    assert to_layout(cl, "channels_last") is cl


def test_empty_result_has_layout_and_dtype():
    p = make()
    out = p.empty_result("cpu")
    assert out.shape == p.output_shape and out.dtype == torch.bfloat16 and is_dense_in(out, "channels_last")


def test_every_architecture_gets_facts():
    from conv_core.arch import spec

    assert spec("sm_90").matrix_instruction == "wgmma"
    assert spec("sm_120").name == "sm_100"  # newest known not newer
    assert spec("sm_75").name == spec("mps").name == spec("meta").name == "generic"


def test_meta_tensors_and_autocast():
    import conv_core

    x, w = torch.randn(2, 4, 8, 8, device="meta"), torch.randn(6, 4, 3, 3, device="meta")
    assert conv_core.conv2d(x, w, padding=1).shape == (2, 6, 8, 8)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert conv_core.conv2d(x, w).dtype == torch.nn.functional.conv2d(x, w).dtype == torch.bfloat16
