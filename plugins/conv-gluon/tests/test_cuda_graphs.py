"""On a Hopper GPU: every candidate captured in a CUDA graph replays what it computes eagerly on new inputs, in
all three directions, and a small model's training step (forward and backward, ``backend="gluon"``) captured
with ``torch.cuda.graph`` gives the eager step's loss and gradients bit for bit (the kernels are deterministic).
The launch site (the compiled kernel's launcher called directly) gives the JIT's bits. Skipped without one."""

from __future__ import annotations

import pytest
import torch
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_core.testing.plugin_checks import assert_launch_site_matches_jit

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
pytestmark = pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")

PROBLEMS = {  # padded weight copies, several phases and zeroed ones, split partials and padded dy, TMA stores
    "3x3 fwd": ConvProblem("fwd", 4, 64, 96, (16, 16), 3, 1, 1, 1, bias=True, activation="relu"),
    "3x3 fwd, 40 channels": ConvProblem("fwd", 4, 40, 128, (16, 16), 3, 1, 1, 1),
    "3x3/2 bwd_data": ConvProblem("bwd_data", 4, 40, 64, (17, 16), 3, 2, 1, 1),
    "1x1/2 bwd_data": ConvProblem("bwd_data", 4, 64, 32, (16, 16), 1, 2, 0, 1),
    "3x3 bwd_data": ConvProblem("bwd_data", 4, 64, 64, (16, 16), 3, 1, 1, 1),
    "3x3 bwd_weight, 36 channels": ConvProblem("bwd_weight", 8, 64, 36, (32, 32), 3, 1, 1, 1),
    "3x3/2 bwd_weight": ConvProblem("bwd_weight", 8, 64, 96, (32, 32), 3, 2, 1, 1),
}


def _offered(name: str) -> tuple[ConvProblem, list[Candidate]]:
    from conv_gluon.candidates import candidates

    problem = PROBLEMS[name].replace(dtype="bfloat16", weight_dtype="bfloat16", out_dtype="bfloat16", arch="sm_90",
                                     layout="channels_last")
    offered = [c for c in candidates(problem, torch.device("cuda")) if isinstance(c, Candidate)]
    assert offered and all("cuda_graph_safe" in c.tags for c in offered), name
    return problem, offered


@pytest.mark.parametrize("name", PROBLEMS)
def test_a_captured_candidate_replays_on_new_inputs(name):
    device = torch.device("cuda")
    problem, offered = _offered(name)
    for c in offered:
        operands = random_operands(problem, device, 2)  # (and the bias, where the problem has one)
        c.run(*operands)  # compiled, weight copies cached
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = c.run(*operands)
        new = random_operands(problem, device, 3)
        for static, fresh in zip(operands, new):  # the weight too: the graph derives its copies from it as it is
            if static is not None:  # random_operands gives a None bias where the problem has none
                static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, c.run(*new)), c.kernel_id


@pytest.mark.parametrize("name", PROBLEMS)
def test_the_launch_site_gives_the_jits_bits(name, monkeypatch):
    problem, offered = _offered(name)
    for c in offered:
        assert_launch_site_matches_jit(c, random_operands(problem, torch.device("cuda"), 1), monkeypatch)


def _model() -> torch.nn.Module:
    """A small network of the layers the plugin serves: 3x3, stride 2, 1x1 (channels multiples of 8)."""
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, stride=2, padding=1),
              torch.nn.ReLU(), torch.nn.Conv2d(64, 32, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 8, 3, padding=1)]
    return torch.nn.Sequential(*layers).cuda().to(torch.bfloat16, memory_format=torch.channels_last)


def _step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).float().square().mean()
    loss.backward()
    return loss


def test_a_captured_training_step_replays_as_eager(monkeypatch):
    import conv_core
    from conv_core.engine import get_engine
    from conv_gluon import launch

    ran = []
    sites = launch._Run.sites
    monkeypatch.setattr(launch._Run, "sites", lambda run, device: ran.append(run.problem.direction) or
                        sites(run, device))
    model = conv_core.convert(_model(), backend="gluon")
    static_x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture stream, as torch.cuda.graph's documentation asks
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            _step(model, static_x)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    ran.clear()
    with torch.cuda.graph(graph):
        static_loss = _step(model, static_x)
    assert set(ran) == {"fwd", "bwd_data", "bwd_weight"}, f"gluon ran {set(ran)} inside the capture"

    new_x = torch.randn_like(static_x)
    static_x.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    replayed = (static_loss.clone(), [p.grad.clone() for p in model.parameters()])
    for p in model.parameters():
        p.grad = None
    eager_loss = _step(model, new_x)
    assert torch.equal(replayed[0], eager_loss)
    for got, param in zip(replayed[1], model.parameters()):
        assert torch.equal(got, param.grad)
    assert get_engine().registry.get("gluon").failures == []
