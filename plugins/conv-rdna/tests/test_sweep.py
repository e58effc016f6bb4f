"""The offline sweep: its space, what it selects, the gate and the timing of each family's candidate (here
interpreted on tiny problems; on a GPU it runs compiled), the choice of winners and the merge into a swept table."""

import json

import pytest
import torch
from conv_tools import sweep as core_sweep
from conv_tools import tune
from conv_core.problem import ConvProblem
from conv_core.kit.tables import layer_key
from conv_tools.suites import available_suites, load_suite
from conv_core.weight_cache import DerivedWeightCache
from conv_rdna import aot, candidates, configs, launch, registry, sweep
from conv_rdna.plans import winograd
from conv_rdna.plans import few_channels as fc_plans
from conv_core.kit.declines import interpreting

FAST = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
SLOW = {**FAST, "num_warps": 4}
WRONG = {**FAST, "BLOCK_N": 256}
STENCIL = {"BLOCK_H": 8, "BLOCK_W": 16, "BLOCK_C": 32, "BLOCK_T": 1, "SLIDE": 4, "num_warps": 4, "num_stages": 1}

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # the backend only reads the device type of CUDA
SPACE = sweep.sweep_space("sm_90")
#: The families this sweep added to the general ones (each takes the space's sm_90 entries).
NEW_FAMILIES = ("few_channels_in", "few_channels_out", "depthwise_fwd", "depthwise_bwd_data", "depthwise_bwd_weight",
                "winograd", "few_channels_in_bwd_weight", "few_channels_out_bwd_weight", "few_channels_in_bwd_data",
                "few_channels_out_bwd_data")


#: The tests that time kernels on CPU tensors: only under the interpreter (CI; conftest.py switches it on).
#: A CUDA run of this file (``CONV_RDNA_TEST_DEVICE=cuda``) compiles the kernels, which cannot take CPU tensors.
on_the_cpu = pytest.mark.skipif(not interpreting(), reason="times kernels on CPU tensors: needs the interpreter")


def row(family, layer, kernel, raw, us, error=None):
    """A result row as the sweep writes it (the atomic weight gradient is timed but may not win)."""
    return {"family": family, "layer": layer, "kernel": kernel, "raw": raw, "us": us, "error": error,
            "may_win": kernel != "bwd_weight_atomic"}


def problem(direction="fwd", **fields) -> ConvProblem:
    base = dict(batch=1, in_channels=16, out_channels=16, input_size=(6, 7), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="float16", layout="channels_last", arch="sm_90")
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


DEPTHWISE = dict(in_channels=8, out_channels=8, groups=8)
#: A tiny problem per new family, on which the family has a kernel.
TINY = {
    "few_channels_in": problem(in_channels=3, out_channels=16, bias=True, activation="relu"),
    "few_channels_out": problem(in_channels=16, out_channels=3, layout="channels_first"),
    "depthwise_fwd": problem(**DEPTHWISE, bias=True),
    "depthwise_bwd_data": problem("bwd_data", **DEPTHWISE, layout="channels_first"),
    "depthwise_bwd_weight": problem("bwd_weight", **DEPTHWISE),
    "winograd": problem(in_channels=64, out_channels=64, input_size=(5, 6)),
    "few_channels_in_bwd_weight": problem("bwd_weight", in_channels=3, out_channels=16, stride=2),
    "few_channels_out_bwd_weight": problem("bwd_weight", in_channels=16, out_channels=3, layout="channels_first"),
    "few_channels_in_bwd_data": problem("bwd_data", in_channels=3, out_channels=16, layout="channels_first"),
    "few_channels_out_bwd_data": problem("bwd_data", in_channels=16, out_channels=3),
}


# ---- the space ------------------------------------------------------------------------------------------------


def test_every_swept_configuration_is_valid_and_fits():
    for arch in ("sm_90",):
        limit = configs.shared_memory_limit(arch)
        for family, entries in sweep.sweep_space(arch).items():
            assert family in registry.FAMILIES
            for raw in entries:
                config = sweep.parse_config(family, raw)
                assert isinstance(config, configs.CONFIG_TYPES.get(family, configs.TileConfig))
                assert config.shared_bytes("bfloat16") <= limit


def test_the_new_families_have_hopper_configurations():
    """Three per family; wgmma wants warp groups (4 warps) and 64 rows in the matrix families; few_channels_out
    is offered only where its smallest tile holds the filter, so every configuration must be at least that."""
    for family in NEW_FAMILIES:
        space = sweep.space_configs("sm_90", family)
        assert len(space) == 3 and len(set(space)) == 3, family
        for config in space:
            if family not in configs.DEPTHWISE_FAMILIES:
                assert config.num_warps % 4 == 0 and config.block_m >= 64, (family, config)
            if family in ("few_channels_out", "few_channels_in_bwd_data"):  # the same kernel
                assert config.block_m >= fc_plans.FEW_COUT_MIN_BLOCK_M
                assert config.block_n >= fc_plans.FEW_COUT_MIN_BLOCK_N
    assert sweep.space_configs("gfx1100", "winograd") == []  # no space: nothing, not an error


def test_the_compile_check_covers_the_space():
    """``python -m conv_rdna.aot --sweep-space`` compiles each configuration of the space in both layouts (the
    depthwise ones on every depthwise geometry), and each job finds its configuration."""
    jobs = aot.space_jobs(("sm_90",))
    for kernel, family in ((e.name, e.family) for e in registry.REGISTRY):
        for config in sweep.space_configs("sm_90", family):
            mine = [j for j in jobs if j.kernel == kernel and j.config == config.name]
            shapes = aot.DEPTHWISE_SHAPES if kernel in registry.DEPTHWISE_KERNELS.values() else ("mid",)
            offered = {(layout, shape) for layout in ("channels_last", "channels_first") for shape in shapes
                       if aot.representative_problem(kernel, "bfloat16", layout, "sm_90", shape) is not None}
            assert offered and {(j.layout, j.shape) for j in mine} == offered, (kernel, config.name)
            assert all(j.launch == aot.MATRIX_LAUNCH.get(kernel, 0) for j in mine)
            assert aot._find_config(configs.table("sm_90"), kernel, config.name) == config


# ---- what a run selects --------------------------------------------------------------------------------------


def select(families=None, suites=None) -> dict[str, frozenset[str]]:
    """What ``run --families ... --suites ...`` sweeps: suite -> families."""
    return core_sweep.selection(sweep.RdnaSpace(), families, suites)


def families_by_suite(selection: dict, directions=("fwd", "bwd_data", "bwd_weight")) -> dict[str, set[str]]:
    """family -> the suites on which a selected problem has a kernel of that family (NHWC)."""
    found: dict[str, set[str]] = {}
    for spec, families in selection.items():
        for p in core_sweep.suite_layers(spec, directions, "channels_last", "bfloat16", "sm_90"):
            if candidates.decline_reason(p, CUDA) is not None:
                continue
            for kernel in candidates.kernels_for(p):
                if registry.REGISTRY.family_of(kernel) in families:
                    found.setdefault(registry.REGISTRY.family_of(kernel), set()).add(spec.split(":")[0])
    return found


def test_default_suites_cover_every_suite_where_the_new_families_occur():
    """By default each new family is swept on every shipped suite that has a layer it serves, at the
    benchmarks' batch; the general families stay on the three suites of the shipped sweep."""
    selection = select()
    for spec in selection:
        name, _, batch = spec.partition(":")
        assert int(batch) == load_suite(name).default_batch
    everywhere = families_by_suite({f"{name}:{load_suite(name).default_batch}": frozenset(NEW_FAMILIES)
                                    for name in available_suites()})
    found = families_by_suite(selection)
    for family in NEW_FAMILIES:
        assert found[family] == everywhere[family], family
    # 2D only (the 3D suites' stems are the general kernels'); resnext_stage: groups of at most 8 channels
    stems = {"resnet50", "sd_vae_decoder", "sd_vae_encoder", "convnext_block", "seg_head_transposed",
             "audio_frontend", "resnext_stage"}
    assert found["few_channels_in"] == found["few_channels_in_bwd_weight"] == stems
    # conv_out 128 -> 3, 512 -> 8, outc 64 -> 2, pix2pix's transposed 128 -> 3
    outputs = {"sd_vae_decoder", "sd_vae_encoder", "seg_head_transposed", "resnext_stage"}
    assert found["few_channels_out"] == found["few_channels_out_bwd_weight"] == outputs
    # stride 1 only: not the stems; the SD-VAE's conv_in, conv_out and 1x1 latent layers
    assert found["few_channels_in_bwd_data"] == {"sd_vae_decoder", "sd_vae_encoder", "resnext_stage"}
    assert found["few_channels_out_bwd_data"] == outputs
    assert found["depthwise_fwd"] == found["depthwise_bwd_weight"] == {"convnext_block", "audio_frontend"}
    assert found["winograd"] == {"resnet50", "sd_vae_decoder", "sd_vae_encoder", "retinanet_head",
                                 "seg_head_transposed"}
    assert found["grouped"] == {"resnext_stage"}
    shipped = {"resnet50", "sd_vae_decoder", "retinanet_head"}
    assert found["implicit_gemm"] == found["bwd_weight"] == shipped
    assert found["gemm1x1"] <= shipped  # the RetinaNet head has no 1x1 layer


def test_families_and_suites_options():
    only = select(families="depthwise_fwd,winograd")
    assert set().union(*only.values()) == {"depthwise_fwd", "winograd"}
    assert set(families_by_suite(only)) == {"depthwise_fwd", "winograd"}
    explicit = select(families="few_channels_in,implicit_gemm", suites="convnext_block:2")
    assert explicit == {"convnext_block:2": {"few_channels_in", "implicit_gemm"}}  # every family on a given suite
    assert select()["convnext_block:32"] == set(sweep.SPECIFIC_FAMILIES)
    assert set(NEW_FAMILIES) <= set(sweep.SPECIFIC_FAMILIES)
    with pytest.raises(SystemExit, match="unknown families"):
        select(families="depthwise")


# ---- gating and timing --------------------------------------------------------------------------------------


@on_the_cpu
@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_each_new_family_is_gated_and_timed(family):
    """Every configuration of the family's space passes the reference gate on a tiny problem and gets a time;
    the other families the problem has kernels for are left out."""
    p = TINY[family]
    assert family in {registry.REGISTRY.family_of(k) for k in candidates.kernels_for(p)}
    rows = core_sweep.sweep_problem(sweep.RdnaSpace(SPACE), p, CPU, frozenset({family}), reps=1)
    assert [r["raw"] for r in rows] == SPACE[family]
    for r in rows:
        assert r["error"] is None and r["us"] > 0, r
        assert r["family"] == family and r["layer"] == layer_key(p)
        assert r["config"].startswith(sweep.parse_config(family, r["raw"]).name)
    assert core_sweep.winners(rows) == {family: {layer_key(p): min(rows, key=lambda r: r["us"])["raw"]}}


@on_the_cpu
def test_winograd_is_gated_with_its_error_factor_and_timed_through_its_cache(monkeypatch):
    seen = []

    def spy(problem, out, operands, candidate=None, known=None):
        seen.append(candidate)
        return compare(problem, out, operands, candidate=candidate, known=known)

    compare = tune.compare
    monkeypatch.setattr(tune, "compare", spy)
    cache = DerivedWeightCache()
    monkeypatch.setattr(winograd, "WEIGHT_CACHE", cache)
    p = TINY["winograd"]
    space = sweep.RdnaSpace({"winograd": SPACE["winograd"][:1]})
    (result,) = core_sweep.sweep_problem(space, p, CPU, frozenset({"winograd"}), reps=2)
    assert result["us"] is not None, result
    (cand,) = seen
    assert cand.kernel == winograd.KERNEL and cand.error_factor == winograd.error_factor(p) > 1
    assert (cache.misses, cache.hits) == (1, 4)  # the gate transforms the weight; warm-up and timing reuse it


@on_the_cpu
def test_a_wrong_result_is_never_a_winner(monkeypatch):
    p = TINY["depthwise_fwd"]
    monkeypatch.setattr(launch.PlanRun, "__call__", lambda self, a, *rest, out=None: (
        self.problem.empty_result(a.device).zero_()))
    rows = core_sweep.sweep_problem(sweep.RdnaSpace(SPACE), p, CPU, frozenset({"depthwise_fwd"}), reps=1)
    assert len(rows) == 3
    for r in rows:
        assert r["us"] is None and "MISMATCH" in r["error"], r
    assert core_sweep.winners(rows) == {}


@on_the_cpu
def test_a_configuration_that_cannot_run_is_an_error_row():
    """few_channels_out needs every tap of an output channel in its columns: 25 taps do not fit 16."""
    p = problem(in_channels=16, out_channels=3, filter_size=5, padding=2)
    narrow = {**SPACE["few_channels_out"][0], "BLOCK_N": 16}
    space = sweep.RdnaSpace({"few_channels_out": [narrow, SPACE["few_channels_out"][0]]})
    rows = core_sweep.sweep_problem(space, p, CPU, frozenset({"few_channels_out"}), reps=1)
    assert rows[0]["us"] is None and rows[0]["error"].startswith("ValueError: few_channels_out cannot run"), rows[0]
    assert rows[1]["error"] is None and rows[1]["us"] > 0
    assert core_sweep.winners(rows) == {"few_channels_out": {layer_key(p): SPACE["few_channels_out"][0]}}


# ---- winners and merge ------------------------------------------------------------------------------------------


def test_winners_are_the_fastest_correct_configurations():
    results = [
        row("implicit_gemm", "L1", "implicit_gemm", SLOW, 20.0),
        row("implicit_gemm", "L1", "implicit_gemm", FAST, 10.0),
        row("implicit_gemm", "L1", "implicit_gemm", WRONG, None, "MISMATCH"),  # failed the gate: never a winner
        row("bwd_weight", "L2", "bwd_weight_atomic", WRONG, 1.0),  # not the deterministic kernel's
        row("bwd_weight", "L2", "bwd_weight_split", SLOW, 5.0),
        row("winograd", "L1", "winograd_f4x3", FAST, 8.0),  # a family of its own: not compared with implicit_gemm
        row("winograd", "L1", "winograd_f4x3", SLOW, 9.0),
        row("depthwise_fwd", "L3", "depthwise_fwd", STENCIL, None, "RuntimeError: out of resources"),
        row("depthwise_fwd", "L3", "depthwise_fwd", {**STENCIL, "BLOCK_C": 64}, 3.0),
    ]
    assert core_sweep.winners(results) == {"implicit_gemm": {"L1": FAST}, "bwd_weight": {"L2": SLOW},
                                      "winograd": {"L1": FAST}, "depthwise_fwd": {"L3": {**STENCIL, "BLOCK_C": 64}}}


@pytest.fixture
def swept_file(tmp_path, monkeypatch):
    """The shipped sm_90 swept table's general families (the new ones not yet swept) in a temporary file,
    which configs.py reads instead of the shipped one."""
    shipped = json.loads(configs.swept_path("sm_90").read_text())
    shipped["layers"] = {f: layers for f, layers in shipped["layers"].items() if f not in NEW_FAMILIES}
    path = tmp_path / "swept" / "sm_90.json"
    path.parent.mkdir()
    path.write_text(json.dumps(shipped))
    monkeypatch.setattr(configs, "swept_path", lambda name: path if name == "sm_90" else tmp_path / f"{name}.json")
    configs.table.cache_clear()
    yield path
    configs.table.cache_clear()


def test_merge_adds_the_new_families_and_marks_them_measured(swept_file, tmp_path):
    shipped = json.loads(swept_file.read_text())
    wino, dw = TINY["winograd"], TINY["depthwise_fwd"]
    depthwise = SPACE["depthwise_fwd"][2]
    results = [row("winograd", layer_key(wino), winograd.KERNEL, SPACE["winograd"][1], 7.0),
               row("winograd", layer_key(wino), winograd.KERNEL, SPACE["winograd"][0], 9.0),
               row("depthwise_fwd", layer_key(dw), "depthwise_fwd", depthwise, 2.0)]
    out = tmp_path / "sweep.json"
    out.write_text(json.dumps({"arch": "sm_90", "device": "NVIDIA H100 80GB HBM3", "results": results}))
    assert not configs.table("sm_90").is_measured("winograd")
    assert "experimental" in {c.kernel: c for c in candidates.candidates(wino, CUDA)}[winograd.KERNEL].tags

    assert sweep.main(["merge", str(out), "--into", str(swept_file)]) == 0
    merged = json.loads(swept_file.read_text())
    for family, layers in shipped["layers"].items():  # the earlier winners stay
        assert merged["layers"][family] == layers
    assert merged["layers"]["winograd"] == {layer_key(wino): SPACE["winograd"][1]}
    assert merged["layers"]["depthwise_fwd"] == {layer_key(dw): depthwise}
    assert merged["measured"] and merged["arch"] == "sm_90"

    configs.table.cache_clear()
    tab = configs.table("sm_90")
    assert tab.is_measured("winograd") and tab.is_measured("depthwise_fwd")
    assert not tab.is_measured("depthwise_bwd_data")
    assert configs.select(tab, "winograd", wino) == sweep.parse_config("winograd", SPACE["winograd"][1])
    assert configs.select(tab, "depthwise_fwd", dw) == configs.StencilConfig.from_dict(depthwise)
    offered = {c.kernel: c for c in candidates.candidates(wino, CUDA)}
    assert "experimental" not in offered[winograd.KERNEL].tags  # the swept table is the one source of the status
    assert offered[winograd.KERNEL].config == sweep.parse_config("winograd", SPACE["winograd"][1]).name
    assert "experimental" in {c.kernel: c for c in candidates.candidates(dw.with_direction("bwd_data"), CUDA)}[
        "depthwise_bwd_data"].tags
