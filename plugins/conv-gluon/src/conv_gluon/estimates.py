"""How long a plan should take: roofline estimates with the table's efficiencies (guesses until measured).

A registry entry (:mod:`conv_gluon.registry`) names one of these; the core ranks the candidates on them until
measured times replace them. Plans carry their geometry, so nothing here rebuilds it from kernel arguments.
"""

from __future__ import annotations

from conv_core.arch import spec
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem

from . import tiling
from .configs import ArchTable
from .plans import DataGradPlan, Plan, WeightGradPlan


def forward_estimate(problem: ConvProblem, p: Plan | DataGradPlan, tab: ArchTable) -> float:
    """The roofline with the kernel's efficiencies, the compute efficiency scaled by the fraction of the
    tiles' matrix work that is real (:func:`tiling.utilization`; for the data gradient, over its phases'
    launches, one launch each)."""
    eff = tab.efficiency[p.kernel]
    launches = [ph.plan for ph in p.phases] if isinstance(p, DataGradPlan) else [p]
    real = done = 0.0
    for lp in launches:
        g, c = lp.geometry, lp.config
        work = g.pixels * g.cout * g.cin * g.groups * g.taps
        real += work
        done += work / tiling.utilization(g, lp.tiles, c.block_m, c.block_n, c.block_k)
    used = real / done if done else 1.0
    return estimate_us(problem, eff["compute"] * used, eff["memory"], launches=max(1, len(launches)))


def weight_grad_estimate(problem: ConvProblem, p: WeightGradPlan, tab: ArchTable) -> float:
    """The roofline with the kernel's efficiencies, the compute scaled by the real fraction of the tiles'
    work (:func:`tiling.weight_grad_utilization`) and by how evenly the units fill the SMs' waves; plus the
    workspaces' round trips through memory (float32 partials, padded ``dy``) and the second stage's launch."""
    eff = tab.efficiency[p.kernel]
    grid, c = p.grid, p.config
    used = tiling.weight_grad_utilization(p.geometry, grid, c.block_m, c.block_n, c.block_k)
    used *= grid.num_units / (-(-grid.num_units // tab.num_sms) * tab.num_sms)
    time = estimate_us(problem, eff["compute"] * used, eff["memory"], launches=2 if p.split else 1)
    return time + 2 * p.workspace_bytes / (spec(problem.arch).copy_tbps * 1e6 * eff["memory"])
