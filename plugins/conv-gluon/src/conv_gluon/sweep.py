"""conv-gluon's offline configuration sweep (the engine is :mod:`conv_tools.sweep`)::

    python -m conv_gluon.sweep run --out sweep.json [--families fwd_box] [--suites sd_vae_decoder:1]
    python -m conv_gluon.sweep merge sweep.json          # -> data/swept/<arch>.json

It times ``data/sweep_space.json``'s configurations of each family on the layers of the suites the
backend is judged on (the SD-VAE decoder and the RetinaNet head, NHWC), every one first gated against the
float64 reference, and ships the fastest per layer as exact-layer entries that :func:`conv_gluon.configs.select`
prefers to the buckets. A family with swept entries on an architecture counts as measured there, so its
candidates lose the ``experimental`` tag.
"""

from __future__ import annotations

import functools
import sys

import torch
from conv_core.problem import ConvProblem
from conv_tools import sweep

from . import candidates, configs
from .registry import REGISTRY


def space_configs(arch: str, family: str) -> list[configs.TileConfig]:
    """``family``'s configurations in ``arch``'s sweep space (none where it has no space); the
    ahead-of-time compile checks take them from here too."""
    space = configs.DATA.json("sweep_space.json")["archs"].get(arch, {})
    return [configs.TileConfig.from_dict(raw, family) for raw in space.get(family, ())]


class GluonSpace:
    """The sweep space of conv-gluon (see :class:`conv_tools.sweep.Space`): every family of the registry."""

    package = "conv_gluon"
    layouts = ("nhwc",)

    @property
    def families(self) -> tuple[str, ...]:
        return REGISTRY.families()

    @property
    def default_suites(self) -> dict[str, tuple[str, ...]]:
        return {"sd_vae_decoder:1": self.families, "retinanet_head:2": self.families}

    def trials(self, problem: ConvProblem, device: torch.device, families: frozenset[str]):
        """Each applicable kernel of ``families`` with every configuration of the space, and with the one
        the table picks today (so a sweep can only replace it by a faster one)."""
        if candidates.decline_reason(problem, device) is not None:
            return []
        tab = configs.table_for(problem.arch)
        trials = []
        for entry in candidates.kernels_for(problem):
            if entry.family not in families:
                continue
            tried = [configs.select(tab, entry.family, problem), *space_configs(tab.name, entry.family)]
            for config in dict.fromkeys(tried):
                trials.append(sweep.Trial(entry.family, entry.name, config.as_dict(),
                                          functools.partial(candidates.candidate, problem, entry.name, config, tab)))
        return trials

    def swept_path(self, arch: str):
        return configs.DATA.swept_path(arch)


def main(argv=None) -> int:
    return sweep.main(GluonSpace(), argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
