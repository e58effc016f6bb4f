"""A layer swept at one batch and image size keeps its configuration at another (no new kernel to compile)."""

from __future__ import annotations

import pytest
from conv_tools import suites
from conv_core.problem import ConvProblem
from conv_core.kit.tables import layer_key
from conv_core.kit import same_layer
from conv_rdna import candidates, configs, registry

LAYER = ConvProblem("fwd", 32, 64, 64, (56, 56), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last", arch="sm_90")


def _entries(**configs_by_problem) -> dict:
    return {layer_key(problem): config for config, problem in configs_by_problem.items()}


def test_the_nearest_batch_and_image_size_of_the_same_layer_is_found():
    entries = _entries(a=LAYER, b=LAYER.replace(batch=8), c=LAYER.replace(input_size=(14, 14)))
    assert same_layer.nearest(entries, LAYER.replace(batch=20)) == "a"  # 1.6x fewer pixels than a, 2.5x more than b
    assert same_layer.nearest(entries, LAYER.replace(batch=6)) == "b"  # 1.3x fewer than b, 3x more than c
    assert same_layer.nearest(entries, LAYER.replace(input_size=(64, 64))) == "a"


def test_another_layer_or_a_far_shape_finds_nothing():
    entries = _entries(a=LAYER)
    for other in (LAYER.replace(in_channels=128), LAYER.replace(layout="channels_first"), LAYER.replace(bias=True),
                  LAYER.replace(dtype="float16", weight_dtype="float16", out_dtype="float16"),
                  LAYER.replace(padding=0), LAYER.with_direction("bwd_data")):
        assert same_layer.nearest(entries, other.replace(batch=16)) is None, other.key
    one_d = ConvProblem("fwd", 32, 64, 64, (56,), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last", arch="sm_90")
    assert same_layer.nearest(entries, one_d) is None
    assert same_layer.nearest(entries, LAYER.replace(batch=32 // 8)) == "a"
    assert same_layer.nearest(entries, LAYER.replace(batch=32 // 16)) is None  # more than MAX_PIXEL_RATIO apart


def test_ties_go_to_the_smaller_key():
    entries = _entries(a=LAYER.replace(batch=64), b=LAYER.replace(batch=16))
    assert same_layer.nearest(entries, LAYER) == same_layer.nearest(dict(reversed(entries.items())), LAYER)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("other", [dict(batch=16), dict(batch=64), dict(image=256)])
def test_resnet50_keeps_swept_configurations(direction, other):
    """Every layer of the suite swept on the H100 (at batch 32 and 224 x 224) runs, at a new batch size or image
    size, a configuration swept for that layer (at the nearest shape the sweep saw), not a bucket's."""
    tab = configs.table("sm_90")
    checked = 0
    for _, problem in suites.suite_problems("resnet50", batch=32, dtype="bfloat16", layout="channels_last",
                                            direction=direction, arch="sm_90"):
        scale = other.get("image", 224) / 224
        moved = problem.replace(batch=other.get("batch", problem.batch),
                                input_size=tuple(round(s * scale) for s in problem.input_size))
        for kernel in candidates.kernels_for(problem):
            entries = tab.layers.get(registry.REGISTRY.family_of(kernel), {})
            if layer_key(problem) in entries:
                swept = {config for key, config in entries.items()
                         if ConvProblem.from_key(f"{key} sm_90").replace(batch=32, input_size=problem.input_size)
                         == problem}
                assert configs.select(tab, registry.REGISTRY.family_of(kernel), moved) in swept, (kernel, moved.key)
                checked += 1
    assert checked >= 20
