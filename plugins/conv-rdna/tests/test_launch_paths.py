"""On a GPU: every candidate gives the same bits through the JIT, through conv-core's launch site (the compiled
kernel's launcher called directly, :mod:`conv_core.launch_site`) and replayed from a CUDA graph on new inputs.

The launch site skips the JIT's per-call binding after the first launch, so a wrong argument order or a
kernel compiled for other alignments would show here as a different result; a graph replay on new inputs
would show a launch bound to the capture's tensors or stream. Runs with ``CONV_RDNA_TEST_DEVICE=cuda``
(the interpreter has only the JIT path).
"""

from __future__ import annotations

import os

import pytest
import torch
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_core.testing.plugin_checks import assert_launch_site_matches_jit
from conv_rdna import candidates

pytestmark = pytest.mark.skipif(os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu") != "cuda",
                                reason="the launch site and CUDA graphs need a GPU")

PROBLEMS = {  # one or more launches, weight caches (Winograd's U, the repacked weight), a workspace
    "3x3 fwd nhwc": ConvProblem("fwd", 4, 64, 64, (16, 16), 3, 1, 1, 1, layout="channels_last"),
    "3x3 fwd nchw": ConvProblem("fwd", 4, 64, 64, (16, 16), 3, 1, 1, 1),
    "3x3 bwd_data nchw": ConvProblem("bwd_data", 4, 64, 64, (16, 16), 3, 1, 1, 1),
    "3x3/2 bwd_weight nhwc": ConvProblem("bwd_weight", 8, 64, 96, (64, 64), 3, 2, 1, 1, layout="channels_last"),
    "stem fwd nhwc": ConvProblem("fwd", 2, 3, 64, (32, 32), 7, 2, 3, 1, layout="channels_last"),
    "stem bwd_weight nchw": ConvProblem("bwd_weight", 4, 3, 64, (64, 64), 7, 2, 3, 1),
    "depthwise fwd nhwc": ConvProblem("fwd", 2, 64, 64, (16, 16), 3, 1, 1, 1, groups=64, layout="channels_last"),
}


def _offered(name: str) -> tuple[ConvProblem, list[Candidate]]:
    """The problem in bf16 and its deterministic candidates (atomics differ in their last bits by design)."""
    problem = PROBLEMS[name].replace(dtype="bfloat16", weight_dtype="bfloat16", out_dtype="bfloat16",
                                     arch="sm_90")
    offered = [c for c in candidates.candidates(problem, torch.device("cuda")) if isinstance(c, Candidate)]
    assert offered, f"no candidate for {name}"
    return problem, [c for c in offered if "deterministic" in c.tags]


@pytest.mark.parametrize("name", PROBLEMS)
def test_the_launch_site_gives_the_jit_bits(name, monkeypatch):
    problem, offered = _offered(name)
    for c in offered:
        assert_launch_site_matches_jit(c, random_operands(problem, torch.device("cuda"), 1), monkeypatch)


@pytest.mark.parametrize("name", PROBLEMS)
def test_a_captured_graph_replays_on_new_inputs(name):
    device = torch.device("cuda")
    problem, offered = _offered(name)
    for c in offered:
        a, b = random_operands(problem, device, 2)[:2]
        c.run(a, b)  # compiled, weight caches filled
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = c.run(a, b)
        new_a, new_b = random_operands(problem, device, 3)[:2]
        a.copy_(new_a)
        b.copy_(new_b)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, c.run(new_a, new_b)), c.kernel_id
