"""conv_core.kit: the pieces every Triton backend shares, checked on their own."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from conv_core.candidate import BackendInfo
from conv_core.geometry import Geometry
from conv_core.kit import declines, phases, tables
from conv_core.kit.hooks import backend_hooks
from conv_core.kit.launch import make_launch, workspace, workspace_layout
from conv_core.kit.registry import README_BEGIN, README_END, KernelEntry, Registry, readme_table
from conv_core.problem import ConvProblem


def problem(**overrides) -> ConvProblem:
    fields = dict(batch=2, in_channels=8, out_channels=16, input_size=(9, 10), filter_size=(3, 3), stride=(2, 2),
                  padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, dtype="bfloat16",
                  layout="channels_last", direction="bwd_data", arch="sm_90")
    fields.update(overrides)
    return ConvProblem(**fields)


def data_gradient_by_phases(dy: torch.Tensor, w: torch.Tensor, g: Geometry) -> torch.Tensor:
    """``dx`` assembled from one stride-1 forward correlation of ``dy`` per phase, as a backend computes it."""
    dx = torch.zeros(g.batch, g.cin, g.h, g.w, dtype=dy.dtype)
    for ph in phases.data_gradient_phases(g):
        if not ph.has_taps:
            continue
        f = ph.geometry(g)
        taps = w[:, :, list(ph.rows.taps)][:, :, :, list(ph.cols.taps)].transpose(0, 1)  # [cin, cout, r', s']
        # the phase's padding may be negative (crop) or run past dy's end: pad generously, then slice
        extra = max(abs(f.pad[0]), abs(f.pad[1])) + f.dil[0] * f.r + f.dil[1] * f.s
        padded = F.pad(dy, (extra, extra, extra, extra))
        top, left = extra - f.pad[0], extra - f.pad[1]
        out = torch.zeros(g.batch, g.cin, f.p, f.q, dtype=dy.dtype)
        for t, u in itertools.product(range(f.r), range(f.s)):
            rows = padded[:, :, top + t * f.dil[0]:, left + u * f.dil[1]:][:, :, :f.p, :f.q]
            out += torch.einsum("nkpq,ck->ncpq", rows, taps[:, :, t, u])
        a, b = ph.first
        dx[:, :, a::g.stride[0], b::g.stride[1]] = out
    return dx


GEOMETRIES = [dict(filter_size=(3, 3), stride=(2, 2), padding=((1, 1), (1, 1))),
              dict(filter_size=(1, 1), stride=(2, 2), padding=((0, 0), (0, 0))),
              dict(filter_size=(3, 3), stride=(2, 2), dilation=(2, 2), padding=((2, 2), (2, 2))),
              dict(filter_size=(5, 3), stride=(3, 2), padding=((2, 1), (0, 2))),
              dict(filter_size=(3, 3), stride=(1, 1), dilation=(3, 1), padding=((3, 1), (3, 1)))]


@pytest.mark.parametrize("fields", GEOMETRIES, ids=str)
def test_the_phases_compute_the_data_gradient(fields):
    g = Geometry.of(problem(**fields))
    torch.manual_seed(0)
    x = torch.randn(g.batch, g.cin, g.h, g.w, dtype=torch.float64, requires_grad=True)
    w = torch.randn(g.cout, g.cin, g.r, g.s, dtype=torch.float64)
    y = F.conv2d(x, w, stride=g.stride, padding=g.pad, dilation=g.dil)
    dy = torch.randn_like(y)
    (expected,) = torch.autograd.grad(y, x, dy)
    torch.testing.assert_close(data_gradient_by_phases(dy, w, g), expected)


def test_every_pixel_belongs_to_one_phase_and_taps_descend():
    g = Geometry.of(problem(filter_size=(1, 1), padding=((0, 0), (0, 0))))
    found = phases.data_gradient_phases(g)
    assert [ph.first for ph in found] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [ph.has_taps for ph in found] == [True, False, False, False]  # a 1x1 filter at stride 2
    assert sum(ph.rows.size * ph.cols.size for ph in found) == g.h * g.w
    axis = phases.phase_axis(0, 9, 5, 2, 2, 1)
    assert axis.taps == (4, 2, 0) and axis.tap_step == 2


def test_buckets_choose_in_order_and_reject_typos():
    parse = dict
    buckets = tables.read_buckets([{"when": {"max_m": 100, "dtypes": ["float16"]}, "config": {"t": 1}},
                                   {"when": {"n_multiple_of": 8, "layouts": ["channels_last"]}, "config": {"t": 2}},
                                   {"config": {"t": 3}}], parse, "test")
    p = problem(direction="fwd")
    assert tables.select(buckets, {}, p, lambda: {"m": 50, "n": 16, "red": 8, "layout": p.layout}) == {"t": 2}
    assert tables.select(buckets, {}, p, lambda: {"m": 50, "n": 12, "red": 8, "layout": p.layout}) == {"t": 3}
    half = p.replace(dtype="float16", weight_dtype="float16", out_dtype="float16")
    assert tables.select(buckets, {}, half, lambda: {"m": 50, "n": 12, "red": 8}) == {"t": 1}
    with pytest.raises(ValueError, match="unknown conditions"):
        tables.read_buckets([{"when": {"max_mm": 1}, "config": {}}, {"config": {}}], parse, "test")
    with pytest.raises(ValueError, match="last bucket"):
        tables.read_buckets([{"when": {"max_m": 1}, "config": {}}], parse, "test")


def test_an_exact_layer_wins_over_the_buckets_without_computing_the_view():
    buckets = tables.read_buckets([{"config": "bucket"}], str, "test")
    p = problem(direction="fwd")
    from conv_core.kit.tables import layer_key

    def view():
        raise AssertionError("the view is computed only when no layer matches")

    assert tables.select(buckets, {layer_key(p): "exact"}, p, view) == "exact"
    assert tables.select(buckets, {layer_key(p): "exact"}, p.replace(batch=4), view) == "exact"  # same layer
    assert tables.distinct_configs(buckets, {"a": "exact", "b": "bucket"}) == ("bucket", "exact")


def test_declines_name_what_is_wrong(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert "TRITON_INTERPRET=1" in declines.device_issue(torch.device("cpu"))
    assert "GPU" in declines.device_issue(torch.device("cpu"), interpretable=False)
    assert "'mps'" in declines.device_issue(torch.device("mps"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert declines.device_issue(torch.device("cpu")) is None
    p = problem(direction="fwd")
    assert declines.dtype_issue(p, ("bfloat16",)) is None
    assert "float32" in declines.dtype_issue(p.replace(dtype="float32"), ("bfloat16",))
    assert "mixed" in declines.dtype_issue(p.replace(weight_dtype="float16"), ("bfloat16", "float16"))
    assert "result dtype float32" in declines.dtype_issue(p.replace(out_dtype="float32"), ("bfloat16",), ("bfloat16",))
    huge = p.replace(batch=2**20, input_size=(64, 64))
    assert "the input has" in declines.int32_issue(huge)
    assert "workspace" in declines.int32_issue(p, ("workspace", 2**31))
    assert declines.grid_issue(p, 70000, "groups") == "groups = 70000 exceeds the grid limit 65535"
    assert "3D" in declines.ndim_issue(problem(direction="fwd", input_size=(4, 4, 4), filter_size=(1, 1, 1),
                                               stride=(1, 1, 1), padding=((0, 0),) * 3, dilation=(1, 1, 1)))


def entry(name, **fields) -> KernelEntry:
    return KernelEntry(name, fields.pop("family", name), fields.pop("directions", ("fwd",)), f"the {name} kernel",
                       plan=lambda *a: None, estimate=lambda *a: 1.0, **fields)


def test_the_registry_derives_candidates_and_the_readme_table():
    registry = Registry([entry("gemm"), entry("box", layouts=("channels_last",)),
                         entry("wgrad", directions=("bwd_weight",), family="gemm",
                               applies=lambda p: "groups > 1" if p.groups > 1 else None)])
    fwd = problem(direction="fwd", layout="channels_first")
    assert [e.name for e in registry.applicable(fwd)] == ["gemm"]
    assert registry.issues(fwd) == {"box": "takes channels_last tensors, not channels_first",
                                    "wgrad": "computes bwd_weight, not fwd"}
    wgrad = problem(direction="bwd_weight", groups=2)
    assert registry.issues(wgrad)["wgrad"] == "groups > 1"
    assert registry.families() == ("gemm", "box")
    readme = f"intro\n{README_BEGIN}\n{registry.markdown_table()}\n{README_END}\nmore"
    assert readme_table(readme) == registry.markdown_table()
    assert "| `box` | fwd | NHWC | the box kernel |" in registry.markdown_table()
    with pytest.raises(ValueError, match="repeat"):
        Registry([entry("gemm"), entry("gemm")])
    with pytest.raises(ValueError, match="directions"):
        entry("bad", directions=("sideways",))


class FakeKernel:
    __name__ = "fake"
    arg_names = ["x_ptr", "y_ptr", "N", "BLOCK"]


def test_launch_arguments_are_checked_on_the_host_and_bound_by_role():
    launch = make_launch(FakeKernel(), (4,), {"x_ptr": "a", "y_ptr": "out"}, {"N": 10}, {"BLOCK": 64}, 4, 2,
                         maxnreg=128)
    assert launch.options == {"num_warps": 4, "num_stages": 2, "maxnreg": 128}
    assert launch.values == {"N": 10, "BLOCK": 64}
    site = launch.site  # called with the tensors by role, each bound to its parameter
    assert (site.pointers, site.roles) == (("x_ptr", "y_ptr"), ("a", "out"))
    assert launch.on_grid((132,)).grid == (132,)
    with pytest.raises(TypeError, match=r"\['BLOCK', 'M'\]"):
        make_launch(FakeKernel(), (1,), {"x_ptr": "a", "y_ptr": "out"}, {"N": 1, "M": 2}, {}, 4)
    with pytest.raises(TypeError, match="no role"):
        make_launch(FakeKernel(), (1,), {"x_ptr": "a", "y_ptr": "out"}, {"N": 1}, {"BLOCK": 1}, 4,
                    descriptors={"w_desc": "map"})


def test_workspace_views_share_one_allocation():
    views, words = workspace_layout(("u", 6, "float32"), ("v", 4, "bfloat16"))
    assert views == (("u", 0, 6, "float32"), ("v", 6, 4, "bfloat16")) and words == 10
    tensors = workspace(words, views, torch.device("cpu"))
    assert tensors["v"].dtype == torch.bfloat16 and tensors["v"].numel() == 8  # 4 float32 words
    assert tensors["u"].data_ptr() == tensors["workspace"].data_ptr()
    assert workspace(0, (), torch.device("cpu")) == {}


def test_backend_hooks_answer_for_the_backend(tmp_path, monkeypatch):
    info = BackendInfo("kitdemo", "1.0", ("sm_90",), "a test backend")
    data = tables.PackageData("conv_core", "aten")
    info_hook, candidates_hook, tables_hook = backend_hooks(info, lambda p, d: ["offered"], data)
    assert info_hook() is info
    assert candidates_hook(problem(), torch.device("cpu")) == ["offered"]
    assert [path.name for path in tables_hook()] == ["aten_sm_90.json"]
    assert info_hook.__name__ == "conv_core_backend_info"
