"""CUDA graphs for every backend: a training step of a small model, captured with each installed backend forced,
replays to what eager computes (run on the GPU machine; there is nothing to capture without CUDA)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import conv_core
from conv_core.arch import device_arch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def _backends() -> list[str]:
    """aten and every backend that claims this GPU (conv-cdna's tables are for AMD Instinct GPUs alone)."""
    if not torch.cuda.is_available():
        return ["aten"]
    arch = device_arch("cuda")
    return [b.name for b in conv_core.get_engine().registry.active()
            if b.name == "aten" or arch in (b.info.targets if b.info else ())]


class Small(nn.Module):
    """3x3, 1x1 and strided layers, channels that every plugin's kernels take."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
            nn.Conv2d(128, 128, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
        )

    def forward(self, x):
        return self.body(x).float().mean()


def _step(model, optimizer, x):
    optimizer.zero_grad(set_to_none=False)
    loss = model(x)
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize("backend", _backends())
def test_a_captured_training_step_replays_as_eager_runs(backend):
    torch.manual_seed(0)
    device = torch.device("cuda")
    base = Small().to(device, torch.bfloat16).to(memory_format=torch.channels_last)
    eager, graphed = copy.deepcopy(base), copy.deepcopy(base)
    conv_core.convert(eager, backend=backend)
    conv_core.convert(graphed, backend=backend)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_graphed = torch.optim.SGD(graphed.parameters(), lr=0.1)
    inputs = [torch.randn(8, 64, 28, 28, device=device, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
              for _ in range(3)]
    static = inputs[0].clone()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile, rank, allocate, outside the capture
        for _ in range(2):
            _step(graphed, opt_graphed, static)
            _step(eager, opt_eager, static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = _step(graphed, opt_graphed, static)

    for x in inputs:
        static.copy_(x)
        graph.replay()
        loss = _step(eager, opt_eager, x)
        torch.testing.assert_close(static_loss, loss, rtol=2e-2, atol=2e-2)
    for (name, p), q in zip(graphed.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.float(), q.float(), rtol=2e-2, atol=2e-2, msg=f"{backend}: {name} differs")
    engine = conv_core.get_engine()
    plugin = engine.registry.get(backend)
    assert not plugin.failures, f"{backend} failed during capture or replay: {plugin.failures[:3]}"
