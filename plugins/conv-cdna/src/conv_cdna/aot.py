"""Ahead-of-time compile checks for gfx90a, gfx942 and gfx950, on the CPU: every shipped configuration.

``python -m conv_cdna.aot [--target gfx942 ...] [--jobs N] [--json PATH] [--markdown PATH]`` compiles each kernel
specialization the CDNA tables can launch (conv-rdna's job list, :func:`conv_rdna.aot.specialized_jobs`, with these
tables, the chip's compile options and the JIT's specialization: 16-byte divisibility of pointers and strides) and
checks the assembly of each: the chip's 16-bit MFMA instruction at the shipped instruction size, no spill and no
scratch, LDS within the chip's limit (the compiler does not check it), VGPRs + AGPRs within the 512 a lane has, and
the main loop software-pipelined as configured (``num_stages`` 2: the next step's operands prefetched in registers
around one LDS buffer; 3: two LDS buffers), with the occupancy (waves per SIMD) the compiler reports.
``--markdown`` writes the per-configuration table of ``docs/cdna-compile.md``.

Must run without ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict

from conv_core.testing.aot import compile_all, compile_failure, distinct, report
from conv_core.kit.declines import interpreting
from conv_rdna import api as rdna_api
from conv_rdna.api import REGISTRY, Job, representative_problem

from . import configs
from .candidates import plan
from .chips import DATA, chip

#: Triton's operand type names, as the chips' MFMA table keys them.
MFMA_DTYPE = {"float16": "fp16", "bfloat16": "bf16"}
MFMA_PATTERN = r"\bv_mfma_\w+"
#: Kernels whose main loop must be software-pipelined on the channels-last ``mid`` geometry: the general GEMM
#: families, whose operand loads are vectors there. Elsewhere (channels-first pixels, few-channel gathers, 1D edge
#: shapes) loads of one element are filtered out of the AMD stream pipeliner on gfx90a/gfx942, so a loop may stay
#: unpipelined; the table in docs/cdna-compile.md says which.
MUST_PIPELINE = ("implicit_gemm", "conv3x3", "gemm1x1", "bwd_data_phased", "bwd_data_shuffle", "bwd_weight_split",
                 "bwd_weight_atomic", "col2im_bwd_data", "winograd_f4x3", "winograd_f4x3_bwd_weight")
#: What the compiler found: configurations that spilled or overflowed on a target, which :mod:`conv_cdna.derive`
#: then never chooses (``python -m conv_cdna.aot --record``).
REJECTED = "rejected.json"


def jobs(targets=configs.TARGETS) -> list[Job]:
    """Every distinct specialization the tables of ``targets`` ship, each once."""
    return distinct_jobs(targets)[0]


def distinct_jobs(targets=configs.TARGETS) -> tuple[list[Job], dict[str, int]]:
    found = rdna_api.specialized_jobs(targets, table=configs.table, plan=plan, dtypes=configs.DTYPES)
    kept, counts = distinct(found, key=lambda pair: pair[0])
    return [job for _, job in kept], counts


def launch_of(job: Job):
    """The job's launch, as conv-cdna makes it on the target, and the dtypes of its pointer roles."""
    tab = configs.table(job.target)
    family = REGISTRY.family_of(job.kernel)
    config = next(c for c in tab.configs(family) if c.name == job.config)
    problem = representative_problem(job.kernel, job.dtype, job.layout, job.target, job.shape)
    return plan(problem, job.kernel, config, tab).launches[job.launch], rdna_api.role_dtypes(problem)


def compile_job(job: Job) -> dict:
    """Compile one job for its CDNA target; its figures (or the error) as a plain dict."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    started = time.perf_counter()
    result = dict(job=asdict(job), id=job.id, expects_matrix=job.expects_matrix_instructions)
    try:
        launch, dtypes = launch_of(job)
        signature, constexprs, attrs = rdna_api.of_launch(launch, dtypes)
        triton.knobs.compilation.always_compile = True
        compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                                  target=GPUTarget("hip", job.target, chip(job.target).warp_size),
                                  options=launch.options)
        result.update(ok=True, num_stages=launch.num_stages, lds=compiled.metadata.shared,
                      **amd_figures(compiled.asm["amdgcn"]), **pipelining(compiled.asm["ttgir"]))
    except Exception as exc:  # reported per job; the test fails on it
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def amd_figures(asm: str) -> dict:
    """Registers, spills, scratch, occupancy and matrix instructions, from the kernel's AMDGCN assembly."""
    def field(pattern: str) -> int:
        match = re.search(pattern, asm, re.MULTILINE)
        return int(match.group(1)) if match else -1

    return dict(vgprs=field(r"^\s*\.vgpr_count:\s+(\d+)"), agprs=max(field(r"^\s*\.agpr_count:\s+(\d+)"), 0),
                total_vgprs=field(r";\s*TotalNumVgprs:\s*(\d+)"),
                spills=max(field(r"^\s*\.vgpr_spill_count:\s+(\d+)"), 0)
                + max(field(r"^\s*\.sgpr_spill_count:\s+(\d+)"), 0),
                scratch_bytes=field(r"^\s*\.private_segment_fixed_size:\s+(\d+)"),
                occupancy=field(r";\s*Occupancy:\s*(\d+)"),
                matrix=sorted(set(re.findall(MFMA_PATTERN, asm))))


def pipelining(ttgir: str) -> dict:
    """How the main loop was pipelined: the LDS buffers of its operand tiles (the leading dimension of the
    ``local_alloc``\\ s) and whether the loop carries LDS tiles from one iteration to the next (the stream
    pipeliner's prefetch)."""
    buffers = [int(n) for n in re.findall(r"ttg\.local_alloc\s*:\s*\(\)\s*->\s*!ttg\.memdesc<(\d+)x\d+x\d+x", ttgir)]
    carried = bool(re.search(r"scf\.for\b[^\n]*iter_args\([^\n]*->\s*\([^\n]*!ttg\.memdesc", ttgir))
    return dict(lds_buffers=max(buffers, default=0), carries_lds=carried)


def problems_of(result: dict) -> list[str]:
    """What is wrong with a compiled job (empty: nothing)."""
    issues = compile_failure(result)
    if issues:
        return issues
    job, c = result["job"], chip(result["job"]["target"])
    if result["expects_matrix"]:
        size = str(c.amd_options["matrix_instr_nonkdim"])
        wanted = c.mfma[size][MFMA_DTYPE[job["dtype"]]]
        if wanted not in result["matrix"]:
            issues.append(f"no {wanted} in the assembly (found {result['matrix'] or 'no MFMA'})")
        stages, piped = result["num_stages"], result["carries_lds"]
        must = job["kernel"] in MUST_PIPELINE and job["layout"] == "channels_last" and job["shape"] == "mid"
        if stages >= 2 and (must or piped) and not (piped and result["lds_buffers"] == stages - 1):
            issues.append(f"main loop not pipelined as num_stages={stages} asks: {result['lds_buffers']} LDS "
                          f"buffers, operands carried across iterations: {piped}")
    if result["spills"]:
        issues.append(f"{result['spills']} spills")
    if result["scratch_bytes"] != 0:
        issues.append(f"{result['scratch_bytes']} bytes of scratch")
    if result["lds"] > c.lds_bytes:
        issues.append(f"LDS {result['lds']} > the chip's {c.lds_bytes}")
    if result["vgprs"] + result["agprs"] > c.registers_per_lane:
        issues.append(f"VGPRs {result['vgprs']} + AGPRs {result['agprs']} > {c.registers_per_lane}")
    return issues


def resource_issue(result: dict) -> bool:
    """Whether the compiler found the configuration too big for the chip: spills, scratch, LDS or registers."""
    return any(word in issue for issue in problems_of(result) for word in ("spill", "scratch", "LDS ", "VGPRs"))


def rejected() -> dict[str, dict[str, list[str]]]:
    """``data/rejected.json``: target -> family -> configuration names the compiler found too big."""
    path = DATA.path(REJECTED)
    return json.loads(path.read_text())["rejected"] if path.is_file() else {}


def record(results: list[dict]) -> None:
    """Add the configurations of ``results`` that were too big for their target to ``data/rejected.json``."""
    found = rejected()
    for r in results:
        if r.get("ok") and resource_issue(r):
            family = REGISTRY.family_of(r["job"]["kernel"])
            names = found.setdefault(r["job"]["target"], {}).setdefault(family, [])
            if r["job"]["config"] not in names:
                names.append(r["job"]["config"])
    doc = ("Configurations the ahead-of-time compiles found too big for a target (spills, scratch, LDS or registers "
           "over the chip's), written by python -m conv_cdna.aot --record; python -m conv_cdna.derive never "
           "chooses them.")
    with open(str(DATA.path(REJECTED)), "w") as f:
        json.dump({"_doc": doc, "rejected": {t: {k: sorted(v) for k, v in sorted(fs.items())}
                                             for t, fs in sorted(found.items())}}, f, indent=1)
        f.write("\n")


def markdown(results: list[dict]) -> str:
    """The per-configuration table: for each target, kernel and configuration, the worst figures over its
    specializations (dtypes, layouts, geometries) of the launch that takes the configuration."""
    rows: dict[tuple, list[dict]] = {}
    for r in results:
        if r.get("ok") and r["job"]["launch"] == rdna_api.MATRIX_LAUNCH.get(r["job"]["kernel"], 0):
            rows.setdefault((r["job"]["target"], r["job"]["kernel"], r["job"]["config"]), []).append(r)
    lines = ["| target | kernel | configuration | compiles | VGPR + AGPR (max) | LDS KiB (max) | occupancy (min) "
             "| MFMA | pipelined | issues |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (target, kernel, config), rs in sorted(rows.items()):
        registers = max(r["vgprs"] + r["agprs"] for r in rs)
        lds = max(r["lds"] for r in rs) / 1024
        occupancy = min(r["occupancy"] for r in rs)
        mfma = ", ".join(sorted({m for r in rs for m in r["matrix"]})) or "none (stencil)"
        stages = {r["num_stages"] for r in rs}
        matrix = [r for r in rs if r["expects_matrix"]]
        piped = sum(r["carries_lds"] for r in matrix)
        piped = f"{piped} of {len(matrix)}" if max(stages) >= 2 and matrix else "-"
        issues = sum(bool(problems_of(r)) for r in rs)
        lines.append(f"| {target} | `{kernel}` | `{config}` | {len(rs)} | {registers} | {lds:.0f} | {occupancy} "
                     f"| {mfma} | {piped} | {issues or 'none'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_cdna.aot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=configs.TARGETS, help="repeatable; default: all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH as a JSON list")
    parser.add_argument("--markdown", metavar="PATH", help="write the per-configuration table to PATH")
    parser.add_argument("--record", action="store_true",
                        help=f"add the configurations that spilled or overflowed to data/{REJECTED}")
    args = parser.parse_args(argv)
    if interpreting():
        parser.error("unset TRITON_INTERPRET: the compile checks need Triton's compiler, not its interpreter")
    todo, counts = distinct_jobs(tuple(args.target or configs.TARGETS))
    print(f"{counts['jobs']} launches, {counts['compiles']} distinct specializations compiled", file=sys.stderr)
    results = compile_all(compile_job, todo, args.jobs)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results))
    if args.record:
        record(results)
    header = f"{'job':64} {'vgpr':>5} {'agpr':>5} {'scr':>4} {'lds':>7} {'occ':>4}  mfma / issues"
    return report(results, args.json, header, _row, problems_of)


def _row(r: dict) -> str:
    matrix = r["matrix"][0] if r["matrix"] else "-"
    return (f"{r['id']:64} {r['vgprs']:5} {r['agprs']:5} {r['scratch_bytes']:4} {r['lds']:7} {r['occupancy']:4}  "
            f"{matrix} {'; '.join(problems_of(r))}")


if __name__ == "__main__":
    sys.exit(main())
