"""Fusion (docs/fusion.md) on real models, on the GPU: what it removes, whether it is right, what it saves.

For each torchvision model (random weights, random batch-norm statistics and
affine parameters, bf16, channels-last, eval mode), in one process:

- calls per forward of batch norms and activation modules, converted vs
  converted + fused (forward hooks), and how many modules fusion rewrote;
- output error of plain PyTorch, converted and converted + fused against a
  float64 run of the plain model (max |y - ref| / max |ref|), and fused vs
  converted directly;
- after eval calls, one training-mode forward of fused vs converted: outputs and
  updated running statistics must agree (the fused model runs its real modules);
- eager inference time (median ms per forward, synchronised) of plain PyTorch
  with ``cudnn.benchmark``, converted, converted + fused;
- with ``--compile``: ``torch.compile(fullgraph=True)`` of the fused model on
  the first model (output vs eager, median ms vs compiled plain).

Usage: python3 scripts/gpu_fusion_check.py OUT.json [--models resnet50,...] [--batch 32] [--reps 30] [--compile]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
import torchvision
from torch import nn

import conv_core

DEVICE = torch.device("cuda")
ACTIVATION_MODULES = (nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU, nn.Hardswish)


class RetinaNetTrunk(nn.Module):
    """RetinaNet's backbone (ResNet-50 + FPN) and head, without the box decoding."""

    def __init__(self):
        super().__init__()
        model = torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None)
        self.backbone, self.head = model.backbone, model.head

    def forward(self, x):
        return self.head(list(self.backbone(x).values()))


MODELS = {
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), 224),
    "mobilenet_v3_large": (lambda: torchvision.models.mobilenet_v3_large(weights=None), 224),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(weights=None), 224),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(weights=None), 224),
    "retinanet": (RetinaNetTrunk, 640),
}


def randomize_norms(model: nn.Module) -> nn.Module:
    """Statistics and affine parameters as a trained model has them, not the identity of a fresh one."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) or type(m).__name__ == "FrozenBatchNorm2d":
                n = m.running_mean.shape
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(n, generator=g) * 0.2)
    return model


def flat(y) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(y) if isinstance(t, torch.Tensor)]


def error(y, ref) -> float:
    """Max |y - ref| / max |ref| over all outputs (float64)."""
    pairs = list(zip(flat(y), flat(ref), strict=True))
    num = max((a.double() - b.double()).abs().max().item() for a, b in pairs)
    return num / max(b.double().abs().max().item() for _, b in pairs)


def count_calls(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """Batch-norm and activation module calls in one forward (hooks removed afterwards)."""
    counts = {"batch_norm": 0, "activation": 0}
    handles = []
    for m in model.modules():
        kind = "batch_norm" if isinstance(m, nn.modules.batchnorm._BatchNorm) or \
            type(m).__name__ == "FrozenBatchNorm2d" else "activation" if isinstance(m, ACTIVATION_MODULES) else None
        if kind:
            handles.append(m.register_forward_hook(lambda *a, k=kind: counts.__setitem__(k, counts[k] + 1)))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return counts


def median_ms(model, x, reps: int) -> float:
    with torch.no_grad():
        for _ in range(5):
            model(x)
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def train_step_agrees(converted: nn.Module, fused: nn.Module, x: torch.Tensor) -> dict:
    """After eval calls, a training-mode forward of both: the same outputs and running statistics."""
    converted, fused = copy.deepcopy(converted).train(), copy.deepcopy(fused).train()
    with torch.no_grad():
        out = error(fused(x), converted(x))
    stats = max(((a.double() - b.double()).abs().max().item() for a, b in zip(fused.buffers(), converted.buffers())
                 if a.is_floating_point()), default=0.0)
    return {"output_error": out, "running_stats_max_diff": stats}


def check_model(name: str, batch: int, reps: int) -> dict:
    build, size = MODELS[name]
    torch.manual_seed(0)
    base = randomize_norms(build()).eval()
    x64 = torch.randn(batch if name != "retinanet" else 4, 3, size, size, dtype=torch.float64)
    with torch.no_grad():
        ref = copy.deepcopy(base).double().to(DEVICE)(x64.to(DEVICE))
    plain = base.to(DEVICE, torch.bfloat16).to(memory_format=torch.channels_last)
    x = x64.to(DEVICE, torch.bfloat16).contiguous(memory_format=torch.channels_last)
    converted = conv_core.convert(copy.deepcopy(plain))
    started = time.perf_counter()
    fused = conv_core.convert(copy.deepcopy(plain), fuse=True)
    row = {"fuse_s": time.perf_counter() - started,
           "fused_modules": sorted(type(m).__name__ for m in fused.modules() if conv_core.fusion.fuse.is_fused(m)),
           "calls_converted": count_calls(converted, x), "calls_fused": count_calls(fused, x)}
    with torch.no_grad():
        y_plain, y_conv, y_fused = plain(x), converted(x), fused(x)
    row["error_vs_float64"] = {"plain": error(y_plain, ref), "converted": error(y_conv, ref),
                               "fused": error(y_fused, ref)}
    row["fused_vs_converted"] = error(y_fused, y_conv)
    row["train_after_eval"] = train_step_agrees(converted, fused, x)
    row["eager_ms"] = {"plain": median_ms(plain, x, reps), "converted": median_ms(converted, x, reps),
                       "fused": median_ms(fused, x, reps)}
    row["speedup_fused_vs_plain"] = row["eager_ms"]["plain"] / row["eager_ms"]["fused"]
    row["speedup_fused_vs_converted"] = row["eager_ms"]["converted"] / row["eager_ms"]["fused"]
    row["_models"] = (plain, fused, x)
    return row


def check_compile(plain: nn.Module, fused: nn.Module, x: torch.Tensor, reps: int) -> dict:
    torch._dynamo.reset()
    compiled_fused = torch.compile(fused, fullgraph=True)
    with torch.no_grad():
        err = error(compiled_fused(x), fused(x))
    compiled_plain = torch.compile(plain)
    return {"fullgraph": True, "compiled_vs_eager_error": err, "ms": {
        "compiled_plain": median_ms(compiled_plain, x, reps), "compiled_fused": median_ms(compiled_fused, x, reps)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch, "models": {}}
    for name in args.models.split(","):
        try:
            row = check_model(name, args.batch, args.reps)
        except Exception as exc:  # one model's failure is a result; the others still run
            row = {"error": f"{type(exc).__name__}: {exc}"}
        models = row.pop("_models", None)
        if args.compile and models is not None and "compile" not in result:
            try:
                result["compile"] = {"model": name, **check_compile(*models, args.reps)}
            except Exception as exc:
                result["compile"] = {"model": name, "error": f"{type(exc).__name__}: {exc}"}
        result["models"][name] = row
        print(name, json.dumps(row, default=str), flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if "compile" in result:
        print("compile", json.dumps(result["compile"]), flush=True)


if __name__ == "__main__":
    main()
