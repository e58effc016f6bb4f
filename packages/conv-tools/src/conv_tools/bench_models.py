"""The models the benchmarks run, by name: how to build each (random weights) and what it takes as input.

torchvision's models are imported only when built, so conv-core needs torchvision only for them;
the networks of :mod:`conv_tools.bench_nets` need nothing but torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from . import bench_nets


class ModelUnavailable(RuntimeError):
    """A model needs a package that is not installed."""


@dataclass(frozen=True)
class ModelSpec:
    """A named model: its builder, one sample's input shape, the batch it is benchmarked at by default."""

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    default_batch: int
    description: str

    def example(self, batch: int, device: torch.device | str, seed: int = 0) -> torch.Tensor:
        """A float32 batch of standard-normal inputs, the same for every call with the same arguments."""
        generator = torch.Generator().manual_seed(seed)
        return torch.randn((batch, *self.input_shape), generator=generator).to(device)


def _torchvision_models(model: str):
    """``torchvision.models``, or :class:`ModelUnavailable` saying which model needed it."""
    try:
        import torchvision.models
    except ImportError as exc:
        raise ModelUnavailable(f"model {model!r} needs torchvision: pip install torchvision ({exc})") from None
    return torchvision.models


def _torchvision(name: str, family: str | None = None, **options) -> Callable[[], nn.Module]:
    """A builder of torchvision's model ``name`` (in ``torchvision.models.<family>``, e.g. ``video``, if given)
    with random weights (nothing is downloaded; ``options`` such as ``weights_backbone=None`` say so where a
    model would otherwise fetch a pretrained backbone)."""
    def build() -> nn.Module:
        models = _torchvision_models(name)
        return getattr(getattr(models, family) if family else models, name)(weights=None, **options)

    return build


def _retinanet() -> nn.Module:
    """RetinaNet (ResNet-50 FPN, v1) as backbone + head; random weights, so the backbone's BN is trainable."""
    detection = _torchvision_models("retinanet").detection
    return bench_nets.BackboneAndHead(detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None))


_SPECS = (
    ModelSpec("tiny", bench_nets.TinyNet, (3, 16, 16), 2,
              "three conv + BN (+ ReLU) layers, a residual add and a strided 1x1 head (CI's CPU model)"),
    ModelSpec("resnet50", _torchvision("resnet50"), (3, 224, 224), 32, "torchvision ResNet-50"),
    ModelSpec("convnext_tiny", _torchvision("convnext_tiny"), (3, 224, 224), 32, "torchvision ConvNeXt-T"),
    ModelSpec("mobilenet_v3_large", _torchvision("mobilenet_v3_large"), (3, 224, 224), 32,
              "torchvision MobileNetV3-Large"),
    ModelSpec("efficientnet_b0", _torchvision("efficientnet_b0"), (3, 224, 224), 32, "torchvision EfficientNet-B0"),
    ModelSpec("retinanet", _retinanet, (3, 640, 640), 4,
              "torchvision RetinaNet ResNet-50 FPN (v1): backbone + head on the feature maps, no box decoding"),
    ModelSpec("sd_vae_decoder", bench_nets.SDVAEDecoder, (4, 64, 64), 1,
              "Stable Diffusion VAE decode path, 4x64x64 latent -> 3x512x512 image (mid-block attention omitted)"),
    ModelSpec("regnet_y_400mf", _torchvision("regnet_y_400mf"), (3, 224, 224), 8, "torchvision RegNetY-400MF"),
    ModelSpec("resnext50_32x4d", _torchvision("resnext50_32x4d"), (3, 224, 224), 8,
              "torchvision ResNeXt-50 32x4d"),
    ModelSpec("unet_like", bench_nets.UNetLike, (4, 64, 64), 8,
              "a small diffusion UNet's convolutions (64/128/256 channels, skips) on a 4x64x64 latent"),
    ModelSpec("yolo_like", bench_nets.YoloLike, (3, 640, 640), 8,
              "a YOLO-style detector's convolutions (CSP blocks, SPPF, three 1x1 heads) on 640x640"),
    ModelSpec("r2plus1d_18", _torchvision("r2plus1d_18", "video"), (3, 16, 112, 112), 8,
              "torchvision R(2+1)D-18 video classifier on 16-frame 112x112 clips (3D convolutions)"),
    ModelSpec("densenet121", _torchvision("densenet121"), (3, 224, 224), 32,
              "torchvision DenseNet-121: each layer's input a concatenation of the feature maps before it"),
    ModelSpec("vgg16_bn", _torchvision("vgg16_bn"), (3, 224, 224), 16,
              "torchvision VGG-16 with batch norm: 13 wide 3x3 layers at full resolution"),
    ModelSpec("fcn_resnet50", _torchvision("fcn_resnet50", "segmentation", weights_backbone=None), (3, 512, 512), 4,
              "torchvision FCN ResNet-50 segmentation (dilated backbone, 21 classes), random weights"),
    ModelSpec("dcgan_generator", bench_nets.DCGANGenerator, (128, 1, 1), 64,
              "DCGAN's generator: a 128-dim latent to a 3x64x64 image by k4 s2 ConvTranspose2d + BN + ReLU"),
    ModelSpec("transposed_decoder", bench_nets.TransposedDecoder, (2048, 16, 16), 8,
              "a segmentation decoder upsampling a 2048x16x16 map by ConvTranspose2d k2 s2 stages (each then two "
              "3x3 conv + BN + ReLU, 512 to 64 channels) and a k4 s2 p1 ConvTranspose2d head to 21x512x512"),
    ModelSpec("video_vae_decoder", bench_nets.VideoVAEDecoder, (16, 3, 32, 32), 1,
              "a video VAE's decoder of causal 3D convolutions: a 16x3x32x32 latent clip to 3x12x256x256 frames "
              "(512 to 128 channels, 2x upsampling in height and width, 2x in time twice)"),
    ModelSpec("vocoder_generator", bench_nets.VocoderGenerator, (80, 256), 4,
              "a neural vocoder's generator (HiFi-GAN V1's layout): 80x256 mel frames to 65,536 samples by "
              "ConvTranspose1d k16 s8, k16 s8, k4 s2, k4 s2 and dilated 1D residual blocks (kernels 3, 7, 11)"),
)
MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}

#: The real-model benchmark's model set (issue 21), whose geomeans the targets are judged on.
HEADLINE_MODELS = ("resnet50", "convnext_tiny", "mobilenet_v3_large", "efficientnet_b0", "retinanet",
                   "sd_vae_decoder")
#: The convolution kinds beyond the 2D dense and depthwise ones of the headline set: 3D (a video classifier and
#: a video VAE decoder), transposed (a segmentation decoder, a vocoder's 1D upsampling) and grouped (ResNeXt).
#: Their real-model runs are reported beside the headline models, with their own geomean, and are not part of
#: the headline targets.
NEW_KIND_MODELS = ("r2plus1d_18", "transposed_decoder", "resnext50_32x4d", "video_vae_decoder", "vocoder_generator")
#: The models a CPU runs in about a minute per mode (``conv-core bench --model`` says so in its help).
CPU_MODELS = ("tiny",)
#: Models whose convolutions are in no shipped suite: the held-out set of the ranking benchmark.
HOLDOUT_MODELS = ("mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "regnet_y_400mf", "resnext50_32x4d",
                  "unet_like", "yolo_like")


def get(name: str) -> ModelSpec:
    """The model called ``name``; a ``KeyError`` listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def build(name: str, seed: int = 0) -> nn.Module:
    """Model ``name`` with the random weights of ``seed`` (the same on every run and every rank)."""
    spec = get(name)
    torch.manual_seed(seed)
    return spec.build()
