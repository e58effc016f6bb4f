"""What Triton's JIT compiles a launch as, read from the JIT's own binder on the CPU (Triton builds it for a
target without a GPU): the compile checks (:mod:`conv_gluon.specialization`) must specialize exactly as it does,
and a problem that differs only in its batch or image size must give the same specialization (no compile on a
new batch or image size)."""

from __future__ import annotations

import pytest
import torch
from conv_core.problem import ConvProblem, torch_dtype
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, descriptors, launch, plans as plan, specialization
from conv_gluon.kernels.bwd_weight import conv_bwd_weight, sum_splits
from conv_gluon.kernels.fwd import conv_fwd
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

TAB = configs.table("sm_90")
BACKEND = make_backend(GPUTarget("cuda", 90, 32))


def problem(direction: str = "fwd", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=64, out_channels=96, input_size=(32, 32), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90", bias=True, activation="gelu")
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def make(p: ConvProblem, kernel: str, config: configs.TileConfig | None = None):
    config = config or configs.select(TAB, REGISTRY.family_of(kernel), p)
    return {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
            "bwd_weight": plan.make_bwd_weight_plan}[p.direction](p, kernel, config, TAB)


def jit_specialization(site, dtypes: dict[str, str]) -> tuple[dict, dict, dict, dict]:
    """``(signature, constexprs, attrs, options)`` the JIT compiles ``site``'s launch as, on 16-byte aligned tensors
    of ``dtypes`` (by parameter name), names for keys and no empty attributes."""
    kernel = site.kernel
    tensors = {name: torch.empty(64, dtype=torch_dtype(dtype)) for name, dtype in dtypes.items()}
    tensors.update({name: build(tensors[name]) for name, build in site.arguments.items()})
    binder = create_function_from_signature(kernel.signature, kernel.params, BACKEND)
    bound, spec, options = binder(**tensors, **site.values, **site.options)
    options, signature, constexprs, attrs = kernel._pack_args(BACKEND, dict(site.options), bound, spec, options)
    names = kernel.arg_names
    return (signature, {names[path[0]]: value for path, value in constexprs.items()},
            {path: attr for path, attr in attrs.items() if attr}, options.__dict__)


def launches(p: ConvProblem, plan_) -> list[tuple[object, dict[str, str], tuple[dict, dict, dict]]]:
    """Each launch of a candidate's run: its site, its tensors' dtypes and what the compile checks compile."""
    run = launch.runner(p, plan_)
    sites = run.sites(torch.device("cpu"))
    if p.direction == "bwd_weight":
        units, total = sites
        found = [(units, run.dtypes, specialization.plan_specialization(plan_, conv_bwd_weight, run.dtypes,
                                                                         descriptors.signature))]
        if total is not None:
            found.append((total, {"ws_ptr": "float32", "out_ptr": p.result_dtype},
                          specialization.sum_specialization(plan_, sum_splits)))
        return found
    plans = [ph.plan for ph in plan_.phases] if p.direction == "bwd_data" else [plan_]
    sites = sites if p.direction == "bwd_data" else (sites,)
    return [(site, run.dtypes, specialization.plan_specialization(lp, conv_fwd, run.dtypes, descriptors.signature))
            for site, lp in zip(sites, plans)]


CASES = {
    "fwd gather": (problem(), "fwd_gather"),
    "fwd registers": (problem(in_channels=3, out_channels=36), "fwd_gather"),
    "fwd box": (problem(), "fwd_box"),
    "fwd rows, TMA store": (problem(out_channels=128, bias=False, activation=None), "fwd_rows_box"),
    "fwd 1D, f32 out": (problem(input_size=(45,), filter_size=5, padding=2, out_dtype="float32"), "fwd_gather"),
    "bwd_data stride 2, odd channels": (problem("bwd_data", in_channels=40, stride=2, bias=False, activation=None),
                                        "bwd_data_gather"),
    "bwd_data rows": (problem("bwd_data", bias=False, activation=None), "bwd_data_rows_box"),
    "bwd_weight gather, split": (problem("bwd_weight", batch=8, bias=False, activation=None), "bwd_weight_gather"),
    "bwd_weight box": (problem("bwd_weight", batch=8, bias=False, activation=None), "bwd_weight_box"),
    "bwd_weight rows": (problem("bwd_weight", batch=8, bias=False, activation=None), "bwd_weight_rows_box"),
    "bwd_weight whole": (problem("bwd_weight", batch=1, input_size=(8, 8), bias=False, activation=None),
                         "bwd_weight_gather"),
    "fwd 3D": (problem(input_size=(6, 16, 16)), "fwd_gather"),
    "bwd_data 3D stride 2": (problem("bwd_data", input_size=(7, 16, 16), stride=2, bias=False, activation=None),
                             "bwd_data_gather"),
    "bwd_weight 3D split": (problem("bwd_weight", batch=4, input_size=(6, 16, 16), bias=False, activation=None),
                            "bwd_weight_gather"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_compile_checks_specialize_as_the_jit(name):
    p, kernel = CASES[name]
    for site, dtypes, (signature, constexprs, attrs) in launches(p, make(p, kernel)):
        jit_signature, jit_constexprs, jit_attrs, options = jit_specialization(site, dtypes)
        assert jit_signature == signature, site.kernel.__name__
        assert jit_attrs == attrs, site.kernel.__name__
        assert jit_constexprs == constexprs and options["num_warps"] == constexprs["num_warps"]


#: Problems that differ from the case's only in the batch or the image size (1D cases: their length). A box
#: kernel's box follows the image (its shape is the tile's), so its image sizes are ones that keep the box. 3D
#: depths are specialised (1 below 3D folds the depth axis away): their variants keep the input and output
#: depths neither 1 nor multiples of 16, within which a new depth compiles nothing.
BATCHES = [dict(batch=1), dict(batch=3), dict(batch=16), dict(batch=32)]
IMAGES = {2: [dict(input_size=(48, 32)), dict(input_size=(96, 32)), dict(input_size=(16, 32))],
          1: [dict(input_size=(61,))], 3: [dict(input_size=(10, 32, 32)), dict(input_size=(7, 48, 16))]}
ODD_IMAGES = {2: [dict(input_size=(13, 17)), dict(input_size=(33, 47))], 1: [dict(input_size=(29,))],
              3: [dict(input_size=(5, 13, 17)), dict(input_size=(9, 33, 47))]}


def variants(what: str, p: ConvProblem) -> list[dict]:
    return {"batch": BATCHES, "image": IMAGES[p.ndim], "odd image": ODD_IMAGES[p.ndim]}[what]


def _split(plan_) -> bool | None:
    return getattr(plan_, "split", None)


def _boxes(plan_) -> set:
    plans = [ph.plan for ph in plan_.phases] if isinstance(plan_, plan.DataGradPlan) else [plan_]
    return {lp.x_map.block if lp.x_map else None for lp in plans}


INVARIANCE = [(name, what) for name in CASES for what in ("batch", "image", "odd image")
              if not (what == "odd image" and CASES[name][1].endswith("_box"))]


@pytest.mark.parametrize("name, what", INVARIANCE, ids=[f"{n}-{w}" for n, w in INVARIANCE])
def test_batch_and_image_size_do_not_change_what_is_compiled(name, what):
    p, kernel = CASES[name]
    base_plan = make(p, kernel)
    base = [jit_specialization(site, dtypes) for site, dtypes, _ in launches(p, base_plan)]
    compared = 0
    for fields in variants(what, p):
        other = p.replace(**fields)
        other_plan = make(other, kernel, base_plan.config)
        if _split(other_plan) != _split(base_plan):
            continue  # one split stores dW in its dtype, several store float32 partials: two kernels by design
        assert _boxes(other_plan) == _boxes(base_plan), f"{fields} changes the box: pick another size"
        got = [jit_specialization(site, dtypes) for site, dtypes, _ in launches(other, other_plan)]
        assert got == base, (name, fields)
        compared += 1
    assert compared, "no variant kept the weight gradient's split: pick other sizes"
