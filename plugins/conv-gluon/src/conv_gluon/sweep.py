"""conv-gluon's offline configuration sweep (the engine is :mod:`conv_core.sweep`)::

    python -m conv_gluon.sweep run --out sweep.json [--families fwd_box] [--suites sd_vae_decoder:1]
    python -m conv_gluon.sweep merge sweep.json          # -> data/swept/<arch>.json

It times ``data/sweep_space.json``'s configurations of each family on the layers of the suites the
backend is judged on (the SD-VAE decoder and the RetinaNet head, NHWC), every one first gated against the
float64 reference, and ships the fastest per layer as exact-layer entries that :func:`conv_gluon.configs.select`
prefers to the buckets. A family with swept entries on an architecture counts as measured there, so its
candidates lose the ``experimental`` tag.
"""

from __future__ import annotations

import json
import sys
from importlib import resources

import torch
from conv_core import sweep
from conv_core.problem import ConvProblem

from . import candidates, configs, plan


def _space() -> dict:
    return json.loads(resources.files("conv_gluon").joinpath("data/sweep_space.json").read_text())


def space_configs(arch: str, family: str) -> list[configs.TileConfig]:
    """``family``'s configurations in ``arch``'s sweep space (none where it has no space); the
    ahead-of-time compile checks take them from here too."""
    return [configs.TileConfig.from_dict(raw, family) for raw in _space()["archs"].get(arch, {}).get(family, ())]


class GluonSpace:
    """The sweep space of conv-gluon (see :class:`conv_core.sweep.Space`)."""

    package = "conv_gluon"
    families = configs.FAMILIES
    default_suites = {"sd_vae_decoder:1": configs.FAMILIES, "retinanet_head:2": configs.FAMILIES}
    layouts = ("nhwc",)

    def trials(self, problem: ConvProblem, device: torch.device, families: frozenset[str]):
        """Each applicable kernel of ``families`` with every configuration of the space, and with the one
        the table picks today (so a sweep can only replace it by a faster one)."""
        if candidates.decline_reason(problem, device) is not None:
            return []
        tab = configs.table_for(problem.arch)
        trials = []
        for kernel in candidates.kernels_for(problem, tab):
            family = plan.KERNELS[kernel]
            if family not in families:
                continue
            tried = [configs.select(tab, family, problem), *space_configs(tab.name, family)]
            for config in dict.fromkeys(tried):
                trials.append(sweep.Trial(family, kernel, config.as_dict(),
                                          lambda kernel=kernel, config=config: candidates.candidate(
                                              problem, kernel, config, tab)))
        return trials

    def swept_path(self, arch: str):
        return configs.swept_path(arch)


def main(argv=None) -> int:
    return sweep.main(GluonSpace(), argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
