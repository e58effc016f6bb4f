"""The cases of conv-gluon's GPU harness (``test_gpu_harness.py``): the issue's shapes, the large layers, the
shapes run twice for determinism, the suites timed, and problems with partial tiles for every configuration.

Shapes are ConvProblem fields (forward, NHWC, bf16 unless given); :func:`make` builds the problem on an arch.
"""

from __future__ import annotations

from conv_core.problem import ConvProblem

#: The issue's shapes: name -> ConvProblem fields (forward, NHWC; bf16 unless given).
ISSUE_SHAPES = {
    "stem-c3-7x7-s2-b8": dict(batch=8, in_channels=3, out_channels=64, input_size=(112, 112), filter_size=7,
                              stride=2, padding=3, bias=True, activation="relu"),
    "c3-3x3-b1": dict(batch=1, in_channels=3, out_channels=40, input_size=(128, 128), filter_size=3, padding=1),
    "c40-3x3-dil2-b1": dict(batch=1, in_channels=40, out_channels=40, input_size=(64, 64), filter_size=3,
                            dilation=2, padding=2, bias=True, activation="gelu"),
    "c40-1x1-b128": dict(batch=128, in_channels=40, out_channels=40, input_size=(28, 28), filter_size=1),
    "c200-3x3-b128": dict(batch=128, in_channels=200, out_channels=200, input_size=(14, 14), filter_size=3,
                          padding=1, bias=True),
    "c200-1x1-s2-b128": dict(batch=128, in_channels=200, out_channels=96, input_size=(28, 28), filter_size=1,
                             stride=2),
    "c256-3x3-s2-b128": dict(batch=128, in_channels=256, out_channels=256, input_size=(14, 14), filter_size=3,
                             stride=2, padding=1, bias=True, activation="silu"),
    "c64-7x7-b1": dict(batch=1, in_channels=64, out_channels=64, input_size=(56, 56), filter_size=7, padding=3),
    "c128-3x3-s2-dil2-b1": dict(batch=1, in_channels=128, out_channels=72, input_size=(33, 31), filter_size=3,
                                stride=2, dilation=2, padding=2),
    "c64-groups4-b8": dict(batch=8, in_channels=64, out_channels=64, groups=4, input_size=(28, 28), filter_size=3,
                           padding=1, activation="relu6"),
    "c200-fp16-gelu-tanh-b1": dict(batch=1, in_channels=200, out_channels=200, input_size=(32, 32), filter_size=3,
                                   padding=1, dtype="float16", bias=True, activation="gelu_tanh"),
    "c40-f32out-b2": dict(batch=2, in_channels=40, out_channels=72, input_size=(20, 20), filter_size=3, padding=1,
                          out_dtype="float32", bias=True, activation="silu"),
    "conv1d-c40-b4": dict(batch=4, in_channels=40, out_channels=40, input_size=(100,), filter_size=5, padding=2),
    "asym-pad-c16-b2": dict(batch=2, in_channels=16, out_channels=24, input_size=(17, 15), filter_size=(3, 2),
                            padding=((0, 2), (1, 0))),
    "k36-retina-bbox-b2": dict(batch=2, in_channels=256, out_channels=36, input_size=(25, 25), filter_size=3,
                               padding=1, bias=True),
    # the data gradient (one forward launch per stride phase)
    "bwd-c40-3x3-s2-b8": dict(direction="bwd_data", batch=8, in_channels=40, out_channels=64, input_size=(28, 28),
                              filter_size=3, stride=2, padding=1),
    "bwd-stem-c3-7x7-s2-b8": dict(direction="bwd_data", batch=8, in_channels=3, out_channels=64,
                                  input_size=(56, 56), filter_size=7, stride=2, padding=3),
    "bwd-c200-1x1-s2-b128": dict(direction="bwd_data", batch=128, in_channels=200, out_channels=96,
                                 input_size=(28, 28), filter_size=1, stride=2),
    "bwd-c256-3x3-dil2-b32": dict(direction="bwd_data", batch=32, in_channels=256, out_channels=256,
                                  input_size=(14, 14), filter_size=3, dilation=2, padding=2),
    "bwd-c64-groups4-b8": dict(direction="bwd_data", batch=8, in_channels=64, out_channels=64, groups=4,
                               input_size=(28, 28), filter_size=3, stride=2, padding=1),
    # the weight gradient (per-tap GEMMs over the pixels, split; dy by TMA, x gathered or boxed)
    "wgrad-stem-c3-7x7-s2-b8": dict(direction="bwd_weight", batch=8, in_channels=3, out_channels=64,
                                    input_size=(112, 112), filter_size=7, stride=2, padding=3),
    "wgrad-c3-3x3-b1": dict(direction="bwd_weight", batch=1, in_channels=3, out_channels=40, input_size=(128, 128),
                            filter_size=3, padding=1),
    "wgrad-c40-3x3-dil2-b1": dict(direction="bwd_weight", batch=1, in_channels=40, out_channels=40,
                                  input_size=(64, 64), filter_size=3, dilation=2, padding=2),
    "wgrad-c40-1x1-b128": dict(direction="bwd_weight", batch=128, in_channels=40, out_channels=40,
                               input_size=(28, 28), filter_size=1),
    "wgrad-c200-3x3-b128": dict(direction="bwd_weight", batch=128, in_channels=200, out_channels=200,
                                input_size=(14, 14), filter_size=3, padding=1),
    "wgrad-c200-1x1-s2-b128": dict(direction="bwd_weight", batch=128, in_channels=200, out_channels=96,
                                   input_size=(28, 28), filter_size=1, stride=2),
    "wgrad-c256-3x3-s2-b128": dict(direction="bwd_weight", batch=128, in_channels=256, out_channels=256,
                                   input_size=(14, 14), filter_size=3, stride=2, padding=1),
    "wgrad-c64-7x7-b1": dict(direction="bwd_weight", batch=1, in_channels=64, out_channels=64, input_size=(56, 56),
                             filter_size=7, padding=3),
    "wgrad-c128-3x3-s2-dil2-b1": dict(direction="bwd_weight", batch=1, in_channels=128, out_channels=72,
                                      input_size=(33, 31), filter_size=3, stride=2, dilation=2, padding=2),
    "wgrad-c64-groups4-b8": dict(direction="bwd_weight", batch=8, in_channels=64, out_channels=64, groups=4,
                                 input_size=(28, 28), filter_size=3, padding=1),
    "wgrad-c200-fp16-b1": dict(direction="bwd_weight", batch=1, in_channels=200, out_channels=200,
                               input_size=(32, 32), filter_size=3, padding=1, dtype="float16"),
    "wgrad-conv1d-c40-b4": dict(direction="bwd_weight", batch=4, in_channels=40, out_channels=40, input_size=(100,),
                                filter_size=5, padding=2),
    "wgrad-k36-retina-bbox-b2": dict(direction="bwd_weight", batch=2, in_channels=256, out_channels=36,
                                     input_size=(25, 25), filter_size=3, padding=1),
    # 3D (NDHWC, the gathering kernels): a video / 3D-VAE block, its stride-2 downsampling, a video stem
    **{f"{prefix}c64-3x3x3-d8-b2": dict(direction=direction, batch=2, in_channels=64, out_channels=64,
                                        input_size=(8, 28, 28), filter_size=3, padding=1)
       for prefix, direction in (("", "fwd"), ("bwd-", "bwd_data"), ("wgrad-", "bwd_weight"))},
    **{f"{prefix}c64-3x3x3-s2-d8-b2": dict(direction=direction, batch=2, in_channels=64, out_channels=64,
                                           input_size=(8, 28, 28), filter_size=3, stride=2, padding=1)
       for prefix, direction in (("", "fwd"), ("bwd-", "bwd_data"), ("wgrad-", "bwd_weight"))},
    "video-stem-c3-3x7x7-s1x2x2-b2": dict(batch=2, in_channels=3, out_channels=64, input_size=(8, 56, 56),
                                          filter_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=True,
                                          activation="relu"),
    # 3D through fwd_box too (stride 1 in the plane): a temporal downsampling, a causal block (depth padding in
    # front only: planes past the volume read as zeros), a temporally dilated one
    "c64-3x3x3-sd2-d9-b2": dict(batch=2, in_channels=64, out_channels=128, input_size=(9, 20, 24), filter_size=3,
                                stride=(2, 1, 1), padding=1, bias=True),
    "causal-c128-3x3x3-d5-b1": dict(batch=1, in_channels=128, out_channels=128, input_size=(5, 32, 32),
                                    filter_size=3, padding=((2, 0), (1, 1), (1, 1)), bias=True, activation="silu"),
    "c32-3x3x3-dd2-d7-b2": dict(batch=2, in_channels=32, out_channels=48, input_size=(7, 17, 19), filter_size=3,
                                dilation=(2, 1, 1), padding=((2, 2), (1, 1), (1, 1)), dtype="float16"),
}

#: The two large layers of the issue: name -> fields.
BIG_LAYERS = {
    "1x512x128x128-512-3x3": dict(batch=1, in_channels=512, out_channels=512, input_size=(128, 128), filter_size=3,
                                  padding=1),
    "128x384x64x64-384-3x3": dict(batch=128, in_channels=384, out_channels=384, input_size=(64, 64),
                                  filter_size=3, padding=1),
}

#: Run twice, compared bit for bit: the large layers and two odd ones (many tiles per program, few channels).
DETERMINISM_SHAPES = {**BIG_LAYERS, "c200-3x3-b128": ISSUE_SHAPES["c200-3x3-b128"],
                      "stem-c3-7x7-s2-b8": ISSUE_SHAPES["stem-c3-7x7-s2-b8"],
                      "bwd-c40-3x3-s2-b8": ISSUE_SHAPES["bwd-c40-3x3-s2-b8"],
                      # the weight gradient: split reductions (partials summed in a fixed order)
                      "wgrad-retina-P3-b2": dict(direction="bwd_weight", batch=2, in_channels=256, out_channels=256,
                                                 input_size=(100, 100), filter_size=3, padding=1),
                      "wgrad-stem-c3-7x7-s2-b8": ISSUE_SHAPES["wgrad-stem-c3-7x7-s2-b8"],
                      "wgrad-c200-3x3-b128": ISSUE_SHAPES["wgrad-c200-3x3-b128"],
                      "wgrad-c64-3x3x3-d8-b2": ISSUE_SHAPES["wgrad-c64-3x3x3-d8-b2"]}

#: Suites benchmarked (name -> batch; None: the suite's own), forward.
SUITES = {"sd_vae_decoder": None, "retinanet_head": None}

#: Suites whose weight gradient the bench stage times against cuDNN's (name -> batch; None: the suite's own).
WGRAD_SUITES = {"retinanet_head": None}


def make(arch: str, fields: dict) -> ConvProblem:
    """The problem of ``fields`` on ``arch`` (its direction given by a ``direction`` field, forward otherwise)."""
    fields = dict(fields)
    direction = fields.pop("direction", "fwd")
    base = dict(stride=1, padding=0, dilation=1, dtype="bfloat16", layout="channels_last", arch=arch)
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def config_problem(arch: str, config, kernel: str = "fwd_gather") -> ConvProblem:
    """A problem with partial tiles everywhere for ``config``: channels not a multiple of BLOCK_K (but of 8, so
    boxes apply), output channels not a multiple of BLOCK_N, pixels not a multiple of BLOCK_M. For the weight
    gradient: input channels not a multiple of BLOCK_N, output channels not of BLOCK_M, and pixels enough
    (about 50 k-steps) that the table splits the reduction."""
    if kernel.startswith("bwd_weight"):
        return make(arch, dict(direction="bwd_weight", batch=8, in_channels=2 * config.block_n - 8,
                               out_channels=2 * config.block_m - 8, input_size=(20, 19), filter_size=3, padding=1))
    return make(arch, dict(batch=3, in_channels=2 * config.block_k - 8, out_channels=2 * config.block_n - 8,
                           input_size=(20, 19), filter_size=3, padding=1, bias=True, activation="gelu"))

