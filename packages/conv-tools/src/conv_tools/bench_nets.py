"""Networks the benchmarks build from layers in code: no download, no package beyond torch.

- :class:`TinyNet`: a few conv + batch-norm + ReLU layers and a residual add, small enough for CI's CPU;
- :class:`SDVAEDecoder`: the Stable Diffusion VAE decode path (diffusers' ``AutoencoderKL`` decoder);
- :class:`UNetLike` and :class:`YoloLike`: the convolution stacks of a diffusion UNet and a YOLO-style
  detector, for judging the ranking on shapes no shipped suite holds;
- :class:`TransposedDecoder`: a segmentation decoder that upsamples by transposed convolutions;
- :class:`DCGANGenerator`: a GAN generator, a stack of k4 s2 transposed convolutions from a latent vector;
- :class:`VideoVAEDecoder`: a video VAE's decoder, built from causal 3D convolutions;
- :class:`VocoderGenerator`: a neural vocoder's generator, transposed 1D upsampling and dilated 1D residual blocks;
- :class:`BackboneAndHead`: a detector's backbone followed by its head on the feature maps, so a
  detector's convolutions run without its box decoding and post-processing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1, act: type[nn.Module] | None = nn.ReLU,
            groups: int = 1) -> nn.Sequential:
    """A bias-free convolution, batch norm and (optionally) an activation: the common CNN unit."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class TinyNet(nn.Module):
    """Three conv + batch-norm (+ ReLU) layers, a residual add and a strided 1x1 head: a CPU smoke test
    with the patterns of a real CNN (a fusable conv-bn-relu chain, a conv whose output is added)."""

    def __init__(self, width: int = 16, out_channels: int = 8) -> None:
        super().__init__()
        self.stem = conv_bn(3, width)
        self.body = nn.Sequential(conv_bn(width, width), conv_bn(width, width, act=None))
        self.head = nn.Conv2d(width, out_channels, 1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        return self.head(F.relu(y + self.body(y)))


# ---- the SD-VAE decoder ------------------------------------------------------------------------


class ResnetBlock(nn.Module):
    """diffusers' ``ResnetBlock2D`` without a time embedding: GroupNorm(32) + SiLU + 3x3 conv, twice, and a
    1x1 shortcut where the channel count changes."""

    def __init__(self, cin: int, cout: int, groups: int = 32) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling, then a 3x3 convolution (diffusers' ``Upsample2D``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UpBlock(nn.Module):
    """Three resnet blocks, then (except in the last block) an upsampler."""

    def __init__(self, cin: int, cout: int, upsample: bool, layers: int = 3) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(ResnetBlock(cin if i == 0 else cout, cout) for i in range(layers))
        self.upsampler = Upsample(cout) if upsample else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.resnets:
            x = block(x)
        return x if self.upsampler is None else self.upsampler(x)


class SDVAEDecoder(nn.Module):
    """The Stable Diffusion (v1/v2) VAE decode path: a 4x64x64 latent to a 3x512x512 image.

    Built from diffusers' ``AutoencoderKL`` architecture: ``post_quant_conv`` 4->4 1x1, ``conv_in``
    4->512, a mid block of two resnet blocks, four up blocks of 512, 512, 256, 128 channels (three
    resnet blocks each, nearest 2x upsampling + 3x3 conv after the first three), then GroupNorm + SiLU
    + ``conv_out`` 128->3. The mid block's self-attention layer is omitted: it holds no convolution and
    costs the same with or without conv-core, so leaving it out only sharpens the comparison. The
    convolutions are those of the ``sd_vae_decoder`` suite.
    """

    def __init__(self, channels: tuple[int, ...] = (512, 512, 256, 128), latent: int = 4) -> None:
        super().__init__()
        self.post_quant_conv = nn.Conv2d(latent, latent, 1)
        self.conv_in = nn.Conv2d(latent, channels[0], 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(channels[0], channels[0]), ResnetBlock(channels[0], channels[0]))
        blocks, cin = [], channels[0]
        for i, cout in enumerate(channels):
            blocks.append(UpBlock(cin, cout, upsample=i < len(channels) - 1))
            cin = cout
        self.up_blocks = nn.Sequential(*blocks)
        self.norm_out = nn.GroupNorm(32, channels[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(channels[-1], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.up_blocks(self.mid(self.conv_in(self.post_quant_conv(z))))
        return self.conv_out(F.silu(self.norm_out(h)))


# ---- stacks for the held-out ranking benchmark ----------------------------------------------------


class UNetLike(nn.Module):
    """A small diffusion UNet's convolutions on a latent: resnet blocks (GroupNorm + SiLU) down three
    levels by strided 3x3 convs, a middle, and back up by nearest upsampling with skip concatenations
    (so the up path convolves odd channel counts such as 384 and 192). No time embedding, no attention."""

    def __init__(self, latent: int = 4, channels: tuple[int, ...] = (64, 128, 256)) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(latent, channels[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        cin = channels[0]
        for i, cout in enumerate(channels):
            self.down.append(ResnetBlock(cin, cout))
            last = i == len(channels) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(cout, cout, 3, stride=2, padding=1))
            cin = cout
        self.mid = ResnetBlock(cin, cin)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i, cout in enumerate(reversed(channels)):
            self.up.append(ResnetBlock(cin + cout, cout))
            last = i == len(channels) - 1
            self.upsample.append(nn.Identity() if last else Upsample(cout))
            cin = cout
        self.norm_out = nn.GroupNorm(32, channels[0])
        self.conv_out = nn.Conv2d(channels[0], latent, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, skips = self.conv_in(x), []
        for block, down in zip(self.down, self.downsample):
            h = block(h)
            skips.append(h)
            h = down(h)
        h = self.mid(h)
        for block, up in zip(self.up, self.upsample):
            h = up(block(torch.cat([h, skips.pop()], dim=1)))
        return self.conv_out(F.silu(self.norm_out(h)))


class CSPBlock(nn.Module):
    """A YOLO cross-stage-partial block: a 1x1 conv split in two halves, bottlenecks (1x1 then 3x3, with
    a residual) on one half, the halves concatenated and mixed by a 1x1 conv."""

    def __init__(self, cin: int, cout: int, depth: int = 1) -> None:
        super().__init__()
        half = cout // 2
        self.split = conv_bn(cin, 2 * half, 1, act=nn.SiLU)
        self.bottlenecks = nn.ModuleList(
            nn.Sequential(conv_bn(half, half, 1, act=nn.SiLU), conv_bn(half, half, 3, act=nn.SiLU))
            for _ in range(depth))
        self.mix = conv_bn((2 + depth) * half, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.split(x).chunk(2, dim=1))
        for bottleneck in self.bottlenecks:
            parts.append(parts[-1] + bottleneck(parts[-1]))
        return self.mix(torch.cat(parts, dim=1))


class YoloLike(nn.Module):
    """A YOLO-style detector's convolutions: strided 3x3 downsampling (conv + BN + SiLU), CSP blocks, a
    spatial-pyramid pooling block, and 1x1 prediction heads on the stride-8/16/32 maps."""

    def __init__(self, width: int = 32, outputs: int = 255) -> None:
        super().__init__()
        w = width
        self.stem = conv_bn(3, w, 3, 2, act=nn.SiLU)
        self.stages = nn.ModuleList()
        for cin, cout, depth in ((w, 2 * w, 1), (2 * w, 4 * w, 2), (4 * w, 8 * w, 2), (8 * w, 16 * w, 1)):
            self.stages.append(nn.Sequential(conv_bn(cin, cout, 3, 2, act=nn.SiLU), CSPBlock(cout, cout, depth)))
        self.sppf_in = conv_bn(16 * w, 8 * w, 1, act=nn.SiLU)
        self.sppf_out = conv_bn(32 * w, 16 * w, 1, act=nn.SiLU)
        self.heads = nn.ModuleList(nn.Conv2d(c, outputs, 1) for c in (4 * w, 8 * w, 16 * w))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, maps = self.stem(x), []
        for stage in self.stages:
            h = stage(h)
            maps.append(h)
        pooled = [self.sppf_in(h)]
        for _ in range(3):
            pooled.append(F.max_pool2d(pooled[-1], 5, stride=1, padding=2))
        maps[-1] = self.sppf_out(torch.cat(pooled, dim=1))
        return tuple(head(m) for head, m in zip(self.heads, maps[1:]))


# ---- a decoder built on transposed convolutions -------------------------------------------------


class TransposedDecoder(nn.Module):
    """A segmentation decoder that upsamples by transposed convolutions, from a backbone's stride-32 map.

    Each stage is a UNet decoder's up path without the skips: a ``ConvTranspose2d`` with kernel 2 and
    stride 2 that doubles the size and halves the channels, then two 3x3 conv + BN + ReLU. A final
    ``ConvTranspose2d`` with kernel 4, stride 2 and padding 1 (the FCN / DCGAN up-conv) maps to the classes
    at the image's size. By default it reads a ResNet-50's 2048 x 16 x 16 map of a 512 x 512 image and
    runs stages of 512, 256, 128, 64 channels (32 to 256 pixels) before the 21-class head at 512.
    """

    def __init__(self, in_channels: int = 2048, widths: tuple[int, ...] = (512, 256, 128, 64),
                 classes: int = 21) -> None:
        super().__init__()
        stages, cin = [], in_channels
        for width in widths:
            stages.append(nn.Sequential(nn.ConvTranspose2d(cin, width, 2, stride=2), conv_bn(width, width),
                                        conv_bn(width, width)))
            cin = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.ConvTranspose2d(cin, classes, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(x))


class DCGANGenerator(nn.Module):
    """DCGAN's generator (Radford et al.): a 128-dim latent (as a 1x1 map) to a 3x64x64 image through a k4 s1
    transposed convolution and four k4 s2 p1 ones, each but the last followed by batch norm and ReLU."""

    def __init__(self, latent: int = 128, width: int = 64) -> None:
        super().__init__()
        channels = [width * 8, width * 4, width * 2, width]
        layers = [nn.ConvTranspose2d(latent, channels[0], 4, 1, 0, bias=False), nn.BatchNorm2d(channels[0]),
                  nn.ReLU()]
        for cin, cout in zip(channels, channels[1:]):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        layers += [nn.ConvTranspose2d(channels[-1], 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


# ---- a video VAE decoder: causal 3D convolutions ---------------------------------------------------------


class CausalConv3d(nn.Module):
    """A 3D convolution that sees no later frame: the time axis is padded in front only, with ``kernel - 1``
    copies of the first frame; height and width are zero-padded by the convolution, as usual."""

    def __init__(self, cin: int, cout: int, kernel: int = 3) -> None:
        super().__init__()
        self.front = kernel - 1
        self.conv = nn.Conv3d(cin, cout, kernel, padding=(0, kernel // 2, kernel // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 0, 0, 0, self.front, 0), mode="replicate"))


class CausalResnetBlock(nn.Module):
    """:class:`ResnetBlock` in 3D with causal convolutions (GroupNorm + SiLU + causal 3x3x3, twice; a 1x1x1
    shortcut where the channel count changes)."""

    def __init__(self, cin: int, cout: int, groups: int = 32) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, cin, eps=1e-6), CausalConv3d(cin, cout)
        self.norm2, self.conv2 = nn.GroupNorm(groups, cout, eps=1e-6), CausalConv3d(cout, cout)
        self.conv_shortcut = nn.Conv3d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class VideoVAEDecoder(nn.Module):
    """A video VAE's decoder: a latent clip (16 x 3 x 32 x 32 by default) to frames (3 x 12 x 256 x 256).

    The layout of the causal video VAEs of video diffusion models: a causal 3x3x3 ``conv_in``, a mid block of
    two causal resnet blocks, then up stages of 512, 256, 128, 128 channels (two causal resnet blocks each);
    after each of the first three, nearest upsampling (2x in height and width, and 2x in time after the first
    two) and a causal 3x3x3 convolution. GroupNorm + SiLU + a causal ``conv_out`` to RGB. No attention (it
    holds no convolution). Every convolution is 3D and sees no later frame (the GroupNorms normalise over the
    whole clip, as in those models).
    """

    def __init__(self, latent: int = 16, channels: tuple[int, ...] = (512, 256, 128, 128),
                 time_ups: int = 2) -> None:
        super().__init__()
        self.conv_in = CausalConv3d(latent, channels[0])
        self.mid = nn.Sequential(CausalResnetBlock(channels[0], channels[0]),
                                 CausalResnetBlock(channels[0], channels[0]))
        stages, cin = [], channels[0]
        for i, cout in enumerate(channels):
            stage = [CausalResnetBlock(cin, cout), CausalResnetBlock(cout, cout)]
            if i < len(channels) - 1:
                stage.append(_VideoUpsample(cout, time=2 if i < time_ups else 1))
            stages.append(nn.Sequential(*stage))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.norm_out = nn.GroupNorm(32, channels[-1], eps=1e-6)
        self.conv_out = CausalConv3d(channels[-1], 3)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.stages(self.mid(self.conv_in(z)))
        return self.conv_out(F.silu(self.norm_out(h)))


class _VideoUpsample(nn.Module):
    """Nearest upsampling by ``time`` x 2 x 2, then a causal 3x3x3 convolution."""

    def __init__(self, channels: int, time: int) -> None:
        super().__init__()
        self.scale = (float(time), 2.0, 2.0)
        self.conv = CausalConv3d(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=self.scale, mode="nearest"))


# ---- a neural vocoder's generator: transposed 1D upsampling, dilated 1D residual blocks -----------------


class DilatedResBlock1d(nn.Module):
    """For each dilation: LeakyReLU, a dilated ``kernel`` convolution, LeakyReLU, an undilated one, added back
    to the input (lengths kept by "same" padding)."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...] = (1, 3, 5)) -> None:
        super().__init__()
        self.dilated = nn.ModuleList(nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2)
                                     for d in dilations)
        self.plain = nn.ModuleList(nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2)
                                   for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dilated, plain in zip(self.dilated, self.plain):
            x = x + plain(F.leaky_relu(dilated(F.leaky_relu(x, 0.1)), 0.1))
        return x


class VocoderGenerator(nn.Module):
    """A neural vocoder's generator (the layout of HiFi-GAN's V1): a mel spectrogram (80 x T) to a waveform
    (1 x 256 T).

    A 7-tap ``conv_pre`` to 512 channels; four upsampling stages by ``ConvTranspose1d`` with kernel twice the
    stride (strides 8, 8, 2, 2: kernels 16, 16, 4, 4), halving the channels, each followed by the mean of
    dilated residual blocks of kernels 3, 7 and 11 (dilations 1, 3, 5); LeakyReLU, a 7-tap ``conv_post`` to
    one channel, tanh. Most of its time is 1D convolutions on long sequences.
    """

    def __init__(self, mels: int = 80, width: int = 512, strides: tuple[int, ...] = (8, 8, 2, 2),
                 kernels: tuple[int, ...] = (3, 7, 11)) -> None:
        super().__init__()
        self.conv_pre = nn.Conv1d(mels, width, 7, padding=3)
        self.ups, self.blocks = nn.ModuleList(), nn.ModuleList()
        channels = width
        for stride in strides:
            self.ups.append(nn.ConvTranspose1d(channels, channels // 2, 2 * stride, stride=stride,
                                               padding=stride // 2))
            channels //= 2
            self.blocks.append(nn.ModuleList(DilatedResBlock1d(channels, k) for k in kernels))
        self.conv_post = nn.Conv1d(channels, 1, 7, padding=3)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for up, blocks in zip(self.ups, self.blocks):
            x = up(F.leaky_relu(x, 0.1))
            x = sum(block(x) for block in blocks) / len(blocks)
        return torch.tanh(self.conv_post(F.leaky_relu(x, 0.1)))


class BackboneAndHead(nn.Module):
    """A detector's ``backbone`` (image -> dict of feature maps) and ``head`` (list of maps -> dict of
    tensors), returned as a tuple: the convolution work of detection, without anchors, box decoding
    or non-maximum suppression, which conv-core does not touch."""

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.backbone = detector.backbone
        self.head = detector.head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.head(list(self.backbone(x).values()))
        return tuple(out[key] for key in sorted(out))
