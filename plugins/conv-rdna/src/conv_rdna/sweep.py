"""conv-rdna's offline configuration sweep: measure, then ship the winners as data (the engine, the gate and
the command line are :mod:`conv_tools.sweep`'s; this module is the space).

Nothing is tuned at run time (:func:`conv_rdna.configs.select` is a pure function of the problem).
Instead this command, run explicitly on a GPU, times a small space of configurations
(``data/sweep_space.json``) for every layer of the model suites, gates each against the float64
reference first (a wrong configuration is never a winner), and writes the fastest per layer::

    python -m conv_rdna.sweep run --out sweep.json                     # every family, default suites
    python -m conv_rdna.sweep run --families depthwise_fwd,winograd --layouts nhwc --out sweep.json
    python -m conv_rdna.sweep merge sweep.json     # -> data/swept/<arch>.json

``run``'s defaults:

- ``--families``: every family (those without entries in the architecture's sweep space have nothing to try).
- ``--suites``: :data:`DEFAULT_SUITES`, each suite at its benchmark batch, and each swept only for the
  families listed with it: the families for particular layers (:data:`SPECIFIC_FAMILIES`) on every suite
  where they occur (few channels, forward and backward: the ResNet-50 and ConvNeXt stems, the SD-VAE
  encoder's and decoder's image and latent layers, the data gradients on the stride-1 ones only; depthwise:
  ConvNeXt; Winograd: the 3x3 layers of all but ConvNeXt); the
  families for any layer (the general ones) on ResNet-50, the SD-VAE decoder and the RetinaNet head, as
  the shipped sweep of 2026-11-21 ran them. Suites given explicitly (``--suites resnet50:32,convnext_block``)
  are swept for every selected family.
- ``--directions fwd,bwd_data,bwd_weight``, ``--layouts nhwc,nchw``, ``--dtype bf16``, ``--reps 10``.

A whole default run takes longer than one GPU call: split it with ``--families``, ``--layouts`` and
``--directions`` (the output is rewritten after each suite, so a time-out keeps what was done).

Every configuration runs through the same :class:`~conv_core.candidate.Candidate` the backend offers
(:func:`conv_rdna.candidates.candidate`): its ``run`` (Winograd's through the transformed-weight cache,
so its timing is the steady state with ``U`` cached) and its error factor in the gate (Winograd's
transforms round derived operands). ``merge`` writes the winners as exact-layer entries of the
architecture the sweep ran on (read by :func:`conv_rdna.configs.table` on top of ``configs.json``'s
own layers, and marking their families measured); buckets stay the fallback for every other problem.
"""

from __future__ import annotations

import functools
import json
import sys
from importlib import resources

import torch
from conv_core.problem import ConvProblem
from conv_tools import sweep as core_sweep
from conv_tools.sweep import Trial

from . import candidates, configs
from .registry import FAMILIES, REGISTRY, SPECIFIC_FAMILIES

#: Families that serve particular layers (few channels in every direction, depthwise, Winograd's 3x3:
#: :data:`conv_rdna.registry.SPECIFIC_FAMILIES`) are swept by default on every suite where such layers occur. The
#: others serve any layer (the general families, as the first sweep of 2026-11-21 ran them) and are swept by
#: default on its three suites only.
#: The default ``--suites`` (``name:batch``, the benchmarks' batches) -> the families swept on each.
DEFAULT_SUITES = {
    "resnet50:32": FAMILIES,  # the stem 3 -> 64 7x7/2 (few_channels_in[_bwd_weight]), 3x3 layers (winograd)
    "sd_vae_decoder:1": FAMILIES,  # conv_in 4 -> 512, conv_out 128 -> 3, post_quant_conv 4 -> 4, 3x3
    "retinanet_head:2": FAMILIES,  # 3x3 towers (winograd); no few-channel or depthwise layer
    "sd_vae_encoder:1": SPECIFIC_FAMILIES,  # conv_in 3 -> 128, conv_out 512 -> 8, quant_conv 8 -> 8, 3x3
    "convnext_block:32": SPECIFIC_FAMILIES,  # depthwise 7x7 at 56..7 (96..768 channels), the stem 3 -> 96 4x4/4
    "video_resnet:8": SPECIFIC_FAMILIES,  # the 3D stem 3 -> 45 (1x7x7)
    "vae3d_decoder:1": SPECIFIC_FAMILIES,  # 3D: conv_in 16 -> 512, conv_out 128 -> 3
    "seg_head_transposed:8": SPECIFIC_FAMILIES,  # the 3x3 double convs (winograd), outc 64 -> 2, pix2pix's 3 -> 128
    "resnext_stage:32": SPECIFIC_FAMILIES,  # grouped 3x3 of 2 to 48 channels per group
    "audio_frontend:8": SPECIFIC_FAMILIES,  # the 1 -> 512 stem, the Conformer's depthwise k31
}


def _space() -> dict:
    return json.loads(resources.files("conv_rdna").joinpath("data/sweep_space.json").read_text())


def sweep_space(arch: str) -> dict[str, list[dict]]:
    """Configurations to try per family on ``arch`` (raw table entries)."""
    return _space()["archs"][arch]


def parse_config(family: str, raw: dict) -> configs.TileConfig | configs.StencilConfig:
    """A raw entry as the configuration class ``family`` takes (as :func:`conv_rdna.configs.table` parses)."""
    return configs.CONFIG_TYPES.get(family, configs.TileConfig).from_dict(raw)


def space_configs(arch: str, family: str) -> list[configs.TileConfig | configs.StencilConfig]:
    """``family``'s configurations in ``arch``'s sweep space, parsed (none where ``arch`` has no space);
    the ahead-of-time compile checks take them from here (``python -m conv_rdna.aot --sweep-space``)."""
    return [parse_config(family, raw) for raw in _space()["archs"].get(arch, {}).get(family, ())]


class RdnaSpace:
    """conv-rdna's sweep space (see :class:`conv_tools.sweep.Space`); ``space`` (family -> raw configurations)
    replaces the architecture's ``data/sweep_space.json`` entries, for tests."""

    package = "conv_rdna"
    families = FAMILIES
    default_suites = DEFAULT_SUITES
    layouts = ("nhwc", "nchw")

    def __init__(self, space: dict[str, list[dict]] | None = None) -> None:
        self.space = space

    def trials(self, problem: ConvProblem, device: torch.device, families: frozenset[str]) -> list[Trial]:
        """Every configuration of the space for each applicable kernel of ``families``, beyond the
        architecture's shared memory left out; the atomic weight gradient is timed but never ships."""
        if candidates.decline_reason(problem, device) is not None:
            return []
        tab = configs.table_for(problem.arch, interpreted=False)
        limit = configs.shared_memory_limit(tab.name)
        space = self.space if self.space is not None else _space()["archs"].get(tab.name, {})
        trials = []
        for entry in REGISTRY.applicable(problem):
            kernel, family = entry.name, entry.family
            if family not in families:
                continue
            for raw in space.get(family, ()):
                config = parse_config(family, raw)
                if limit is not None and config.shared_bytes(problem.dtype) > limit:
                    continue
                trials.append(Trial(family, kernel, raw,
                                    functools.partial(candidates.candidate, problem, kernel, config, tab, device),
                                    may_win=kernel != "bwd_weight_atomic"))
        return trials

    def swept_path(self, arch: str):
        return configs.swept_path(arch)


def main(argv=None) -> int:
    return core_sweep.main(RdnaSpace(), argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
