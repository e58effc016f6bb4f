"""Every shipped configuration compiles for sm_90a on the CPU, and the PTX / SASS show what the design needs.

The job list (:func:`conv_gluon.aot.jobs`) is computed here; the compiling happens in one
``python -m conv_gluon.aot`` subprocess with one compile process per core (a fresh Triton cache, so ptxas
runs and reports). Each job must issue ``wgmma`` asynchronously (one left in flight), redistribute registers
with ``setmaxnreg``, spill nothing, use no local memory, stay within 227 KiB of shared memory and the tables'
own bound, and load the weights (and, for boxes, the input) by TMA; gathering producers must use ``cp.async``
with their ``noinc`` barrier arrivals. The weight gradient's jobs the same, with ``dy`` by TMA and read
transposed by the ``wgmma`` (``tnspA``); its second stage must compile without spills.
"""

from __future__ import annotations


from conv_core.testing.plugin_checks import compile_check_tests
from conv_core.arch import spec
from conv_gluon.registry import REGISTRY
from conv_gluon import aot, configs, plans, specialization, sweep

JOBS = aot.jobs()

#: one ``python -m conv_gluon.aot`` run (1-4 s per distinct compile and core), one test per job
compiled, test_compiles_cleanly = compile_check_tests("conv_gluon.aot", JOBS, aot.problems_of, 8, 600)


def test_every_shipped_configuration_is_compiled_in_every_mode():
    tab = configs.table(aot.TARGET)
    for mode, (kernel, _) in aot.MODES.items():
        shipped = {c.name for c in tab.configs(REGISTRY.family_of(kernel))}
        space = {c.name for c in sweep.space_configs(aot.TARGET, REGISTRY.family_of(kernel))}  # any may ship later
        done = {job.config for job in JOBS if job.mode == mode and job.shape == aot.base_shape(mode)}
        assert shipped | space == done, mode
    assert {job.dtype for job in JOBS} == {"bfloat16", "float16"}
    for mode in ("tma_box", "tma_rows", "wgrad_box"):
        box_shapes = {aot.job_plan(job)[1].x_map.block[1:3] for job in JOBS if job.mode == mode}
        assert {bw for _, bw in box_shapes} == set(tab.box_widths), mode  # every box width the table allows


def test_3d_is_compiled_in_every_gathering_mode_of_every_direction_and_in_the_boxes_that_take_it():
    """3D specializations (depth taps and bounds live, not folded) in each mode of the gathering kernels and in
    the box kernels of ``plans.BOXES_3D`` (the data gradient's: a depth phase's negative padding)."""
    third = [job for job in JOBS if "3d" in job.shape]
    gathering = {mode for mode, (kernel, _) in aot.MODES.items() if kernel.endswith("_gather")}
    assert {job.mode for job in third} == gathering | {"tma_box", "wgrad_box"}
    assert {job.kernel for job in third} == {"fwd_gather", "bwd_data_gather", "bwd_weight_gather", *plans.BOXES_3D}
    for job in third:
        p = aot.job_plan(job)[1]
        assert p.geometry.t == 3 or job.kernel.startswith("bwd_data"), job.id  # (a phase: fewer depth taps)
        assert dict(p.scalars)["Z"] > 1, job.id


def test_forward_jobs_cover_both_epilogues_of_the_filter_columns():
    """``fwd_rows_box`` stores 16-bit dense outputs by TMA and the others from registers (or staged): both are
    compiled."""
    plans = [aot.job_plan(job)[1] for job in JOBS if job.mode == "tma_rows"]
    stores = {dict(p.constexprs)["TMA_STORE"] for p in plans}
    assert stores == {True, False} and any(dict(p.constexprs)["STAGE_OUT"] for p in plans)


def test_weight_gradient_jobs_cover_both_stores_and_the_second_stage():
    plans = [aot.job_plan(job)[1] for job in JOBS if job.weight_grad and job.mode != aot.SUM_MODE]
    assert any(p.split for p in plans) and any(not p.split for p in plans)
    whole = [dict(p.constexprs)["STAGE_OUT"] for p in plans if not p.split]
    assert any(whole) and not all(whole)  # 16-bit dW stored from registers and staged
    assert {p.x_mode for p in plans} == {"cp_async", "registers", "tma_box"}
    assert {job.dtype for job in JOBS if job.mode == aot.SUM_MODE} == {"bfloat16", "float16"}


def test_the_shared_memory_limit_is_the_architectures(compiled):
    assert all(r["shared_limit"] == spec("sm_90").shared_memory_bytes == 232448 for r in compiled.values())


def test_wgmma_shapes_follow_the_tiles(compiled):
    """One warpgroup per 64 rows up to 128 columns, two side by side beyond (BLOCK_N 256: n128 each)."""
    for result in compiled.values():
        if result.get("kind") == "sum":
            continue
        config = aot.find_config(aot.MODES[result["job"]["mode"]][0], result["job"]["config"])
        n = config.block_n // (2 if config.block_n >= 256 and config.num_warps == 8 else 1)
        dtype = specialization.TRITON_DTYPE[result["job"]["dtype"]].replace("fp", "f")
        assert result["wgmma"] == [f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype}"], result["id"]


def test_registers_are_moved_to_the_consumer(compiled):
    """The producer gives registers back (setmaxnreg.dec to its budget), the consumer takes more."""
    for result in compiled.values():
        if result.get("kind") == "sum":
            continue
        producer = aot.producer_of(aot.Job(**result["job"]), result["a_mode"])
        values = {(kind, int(n)) for kind, n in result["setmaxnreg"]}
        assert ("inc", producer.regs) in values or ("dec", producer.regs) in values, result["id"]
        assert any(kind == "inc" and n > result["planned_maxnreg"] for kind, n in values), result["id"]


def test_problems_of_flags_what_it_should():
    """The checks themselves: a result with a spill, a synchronous wgmma or too much shared memory fails."""
    good = dict(ok=True, wgmma=["wgmma.mma_async"], sass_hgmma=["HGMMA.64x64x16.F32.BF16"], wgmma_wait=[0, 1],
                sass_depbar=[1], in_flight=1, setmaxnreg=[("inc", "240")], sass_setmaxreg=2, maxnreg=168, threads=384,
                sass_transposed_a=False,
                planned_maxnreg=168, planned_threads=384, registers=168, spill_bytes=0, stack_bytes=0,
                local_memory=0, sass_local=0, shared=1000, shared_limit=232448, shared_bound=2000, tma_2d=1,
                tma_4d=0, tma_store=0, cp_async=8, cp_async_arrive=1, a_mode="cp_async")
    assert aot.problems_of(good) == []
    for change in (dict(spill_bytes=8), dict(wgmma_wait=[0]), dict(sass_depbar=[0]), dict(in_flight=3),
                   dict(setmaxnreg=[]), dict(shared=300000), dict(shared=2500), dict(sass_local=1), dict(tma_2d=0),
                   dict(cp_async=0), dict(maxnreg=255), dict(ok=False, error="x"), dict(a_mode="tma_box"),
                   dict(kind="wgrad"), dict(tma_store_planned=True)):
        assert aot.problems_of({**good, **change}), change
    assert aot.problems_of({**good, "tma_store_planned": True, "tma_store": 1}) == []
    wgrad = {**good, "kind": "wgrad", "sass_transposed_a": True}
    assert aot.problems_of(wgrad) == []
    assert aot.problems_of({**wgrad, "a_mode": "tma_box", "tma_2d": 0, "tma_4d": 2, "cp_async": 0}) == []
    assert aot.problems_of({**wgrad, "tma_2d": 0}) == ["dy is not loaded by TMA"]
    summed = dict(ok=True, kind="sum", spill_bytes=0, stack_bytes=0, local_memory=0, sass_local=0, shared=0,
                  shared_limit=232448)
    assert aot.problems_of(summed) == [] and aot.problems_of({**summed, "spill_bytes": 4})


def test_each_distinct_specialization_is_compiled_once():
    """Jobs the JIT specializes alike (a box width a wide tile cannot take, say) share one compile; each keeps its
    own id and its own plan's expectations."""
    keys = [aot.specialization_key(job) for job in JOBS]
    assert len(set(keys)) < len(JOBS)
    first = {}
    for key, job in zip(keys, JOBS):
        first.setdefault(key, job)
    assert all(aot.planned(job)["id"] == job.id for job in JOBS if first[aot.specialization_key(job)] is not job)
