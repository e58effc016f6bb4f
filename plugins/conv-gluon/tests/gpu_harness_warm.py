"""The warm stage of conv-gluon's GPU harness: every distinct kernel the other stages launch, compiled without
running by parallel processes (each through Triton's JIT, so the kernels land in Triton's on-disk cache,
where the stages find them). Compiling, about 1-3 s per kernel and one at a time otherwise, would dominate
the run.

The launches are planned from the problems alone, with no GPU: ``python3 plugins/conv-gluon/tests/gpu_harness_warm.py``
lists them and how many distinct kernels they compile.
"""

from __future__ import annotations

import sys

import torch
from conv_core.problem import ConvProblem
from conv_tools.suites import suite_problems
from gpu_harness_cases import BIG_LAYERS, DETERMINISM_SHAPES, ISSUE_SHAPES, SUITES, make
from gpu_harness_run import Run
from gpu_harness_stages import CONFIG_KERNELS, KIT, WARM_TIMEOUT_S, forced, gluon_candidates, wgrad_suite_problems

STAGES = ("warm", "issue", "configs", "determinism", "bench", "suites", "kit")


def planned(arch: str = "sm_90", stages=STAGES) -> list[tuple[str, str, ConvProblem, object]]:
    """``(stage, case, problem, plan)`` of every kernel launch the stages make, from the problems alone: no GPU
    needed (this module run as a script lists them)."""
    from conv_core.testing.conformance import conformance_problems
    from conv_gluon import configs
    from conv_gluon.registry import REGISTRY

    device = torch.device("cuda")  # only its type is read
    found = []

    def add(stage, name, problem):
        if stage in stages:
            for candidate in gluon_candidates(problem, device)[0]:
                found.append((stage, f"{name} {candidate.kernel}", problem, candidate.run.plan))

    for name, fields in ISSUE_SHAPES.items():
        add("issue", name, make(arch, fields))
    tab = configs.table_for(arch)
    for kernel in CONFIG_KERNELS:
        for config in tab.configs(REGISTRY.family_of(kernel)) if "configs" in stages else ():
            problem, p, _ = forced(arch, kernel, config)
            found.append(("configs", f"{kernel}:{config.name}", problem, p))
    for name, fields in DETERMINISM_SHAPES.items():
        add("determinism", name, make(arch, fields))
    for name, fields in BIG_LAYERS.items():
        add("bench", name, make(arch, fields))
    for name, problem in wgrad_suite_problems(arch):
        add("bench", f"wgrad {name}", problem)
    for suite, batch in SUITES.items():
        for layer, problem in suite_problems(suite, batch=batch, dtype="bfloat16", layout="channels_last",
                                             direction="fwd", arch=arch):
            add("suites", f"{suite}/{layer[:60]}", problem)
    kit = {k: v for k, v in KIT.items() if k != "seed"}
    for problem in conformance_problems(arch, seed=KIT["seed"], edge=True, **kit):
        add("kit", problem.key, problem)
    return found

def _kernel_key(problem: ConvProblem, p) -> tuple:
    """What Triton's JIT specializes a candidate's launches on (two with one key share compiled kernels)."""
    from conv_gluon import launch, plans as plan, specialization
    from conv_gluon.kernels.fwd import conv_fwd

    def described(tmap, dtype):
        return f"{dtype}{tmap.block}"

    if isinstance(p, plan.WeightGradPlan):
        from conv_gluon.kernels.bwd_weight import conv_bwd_weight, sum_splits

        signature, constexprs, _ = specialization.plan_specialization(
            p, conv_bwd_weight, launch.role_dtypes(problem, p), described)
        second = specialization.sum_specialization(p, sum_splits)[:2] if p.split else None
        return (tuple(signature.items()), tuple(constexprs.items()), p.maxnreg,
                None if second is None else (tuple(second[0].items()), tuple(second[1].items())))
    launches = [ph.plan for ph in p.phases] if isinstance(p, plan.DataGradPlan) else [p]
    key = []
    for lp in launches:
        signature, constexprs, _ = specialization.plan_specialization(lp, conv_fwd, launch.role_dtypes(problem),
                                                                      described)
        key.append((tuple(signature.items()), tuple(constexprs.items()), lp.maxnreg))
    return tuple(key)


def distinct(cases) -> list:
    """The first case of each distinct kernel."""
    seen, first = set(), []
    for case in cases:
        key = _kernel_key(case[2], case[3])
        if key not in seen:
            seen.add(key)
            first.append(case)
    return first


def list_cases() -> int:
    """Print the launches the stages make and how many distinct kernels they compile (compiling dominates a
    first run: about 1-3 s per distinct kernel on one core)."""
    cases = planned()
    new = {id(c) for c in distinct(cases)}
    for case in cases:
        stage, name, _, p = case
        mode = getattr(p, "a_mode", f"{len(getattr(p, 'phases', ()))} phases")
        print(f"{stage:8} {name:70} {mode:9} {p.config_name:18} {'compile' if id(case) in new else ''}")
    print(f"{len(cases)} candidates, {len(new)} distinct to compile")
    return 0


def _warm_chunk(arch: str, items: list[tuple[str, str, str]]) -> list[str]:
    """In a child process: compile ``(problem key, kernel, configuration)`` launches through the JIT (into
    Triton's on-disk cache); return the errors."""
    from conv_gluon import configs, launch, plans as plan
    from conv_gluon.registry import REGISTRY

    tab = configs.table_for(arch)
    device = torch.device("cuda")
    errors = []
    for key, kernel, config_name in items:
        try:
            problem = ConvProblem.from_key(key)
            config = next(c for c in tab.configs(REGISTRY.family_of(kernel)) if c.name == config_name)
            make = {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
                    "bwd_weight": plan.make_bwd_weight_plan}[problem.direction]
            launch.warmup(problem, make(problem, kernel, config, tab), device)
        except Exception as exc:
            errors.append(f"{kernel} {key}: {type(exc).__name__}: {exc}"[:300])
    return errors


def stage_warm(run: Run, device: torch.device, arch: str, workers: int, stages) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    def one():
        kernels = distinct(planned(arch, stages))
        items = [(problem.key, p.kernel, p.config_name) for _, _, problem, p in kernels]
        chunks = [items[i::workers] for i in range(workers) if items[i::workers]]
        errors = []
        if chunks:
            with ProcessPoolExecutor(len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
                for found in pool.map(_warm_chunk, [arch] * len(chunks), chunks):
                    errors += found
        return {"status": "fail" if errors else "ok", "kernels": len(items), "errors": errors,
                "message": f"{len(items)} kernels in {len(chunks)} processes"
                           + (f"; {len(errors)} failed, first: {errors[0]}" if errors else "")}

    run.case("warm", "compile every distinct kernel", one, timeout_s=WARM_TIMEOUT_S)



if __name__ == "__main__":
    sys.exit(list_cases())
