"""The shipped shape suites describe the real models, and the suite API reads them.

Each suite is checked three ways: hand-counted totals and a few hand-checked
layers (from the architectures' definitions), and an exact comparison with the
convolutions captured from a convolution skeleton of the model written here
(the real module names and data flow, without norms and activations, which
do not change shapes), run on the ``meta`` device so it costs nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import conv_core
from conv_core.frontend.capture import capture_shapes
from conv_core.problem import ConvProblem
from conv_tools.suites import (
    TRANSPOSED_DIRECTIONS,
    Suite,
    SuiteLayer,
    available_suites,
    direction_label,
    layer_direction,
    load_suite,
    problems_from_shape,
    suite_problems,
    transposed_layers,
)

SUITES = ["audio_frontend", "convnext_block", "resnet50", "resnext_stage", "retinanet_head", "sd_vae_decoder",
          "sd_vae_encoder", "seg_head_transposed", "vae3d_decoder", "video_resnet"]


# ---- convolution skeletons of the models ---------------------------------------------------------


class Bottleneck(nn.Module):
    """torchvision ResNet v1.5 bottleneck: the stride is on the 3x3 conv (grouped in ResNeXt)."""

    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, base_width: int = 64) -> None:
        super().__init__()
        width = planes * base_width // 64 * groups
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False))

    def forward(self, x):
        out = self.conv3(self.conv2(self.conv1(x)))
        return out + (x if self.downsample is None else self.downsample(x))


class ResNet50(nn.Module):
    def __init__(self, groups: int = 1, base_width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(cin, planes, stride if b == 0 else 1, groups, base_width))
                cin = planes * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))

    def forward(self, x):
        return self.stages(self.maxpool(self.conv1(x)))

    def stages(self, x):
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class VaeResnet(nn.Module):
    """diffusers ResnetBlock2D: conv1, conv2, and a 1x1 conv_shortcut when the channels change."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv2(self.conv1(x))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class PadRightConv(nn.Conv2d):
    """diffusers Downsample2D(padding=0): pad right/bottom by 1, 3x3 stride 2, as one asymmetric conv-core call."""

    def forward(self, x):
        return conv_core.conv2d(x, self.weight, self.bias, 2, ((0, 1), (0, 1)))


class VaeDownBlock(nn.Module):
    def __init__(self, cin: int, cout: int, downsample: bool) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([VaeResnet(cin, cout), VaeResnet(cout, cout)])
        self.downsamplers = nn.ModuleList([nn.ModuleDict({"conv": PadRightConv(cout, cout, 3)})]) if downsample \
            else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        return x if self.downsamplers is None else self.downsamplers[0]["conv"](x)


class VaeUpBlock(nn.Module):
    def __init__(self, cin: int, cout: int, upsample: bool) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([VaeResnet(cin if i == 0 else cout, cout) for i in range(3)])
        self.upsamplers = nn.ModuleList([nn.ModuleDict({"conv": nn.Conv2d(cout, cout, 3, padding=1)})]) \
            if upsample else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0]["conv"](F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return x


class VaeMidBlock(nn.Module):
    """Two resnets around an attention block made of Linear layers (no convolutions)."""

    def __init__(self) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([VaeResnet(512, 512), VaeResnet(512, 512)])

    def forward(self, x):
        return self.resnets[1](self.resnets[0](x))


class VaeEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, 128, 3, padding=1)
        channels = [128, 256, 512, 512]
        self.down_blocks = nn.ModuleList(
            VaeDownBlock(channels[max(i - 1, 0)], c, i < 3) for i, c in enumerate(channels))
        self.mid_block = VaeMidBlock()
        self.conv_out = nn.Conv2d(512, 8, 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        return self.conv_out(self.mid_block(x))


class VaeDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(4, 512, 3, padding=1)
        self.mid_block = VaeMidBlock()
        channels = [512, 512, 256, 128]
        self.up_blocks = nn.ModuleList(
            VaeUpBlock(channels[max(i - 1, 0)], c, i < 3) for i, c in enumerate(channels))
        self.conv_out = nn.Conv2d(128, 3, 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(x)


class VaeEncode(nn.Module):
    """AutoencoderKL.encode: the encoder, then quant_conv on the 2 x 4 moments."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = VaeEncoder()
        self.quant_conv = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.quant_conv(self.encoder(x))


class VaeDecode(nn.Module):
    """AutoencoderKL.decode: post_quant_conv, then the decoder."""

    def __init__(self) -> None:
        super().__init__()
        self.post_quant_conv = nn.Conv2d(4, 4, 1)
        self.decoder = VaeDecoder()

    def forward(self, z):
        return self.decoder(self.post_quant_conv(z))


class RetinaNetHead(nn.Module):
    """torchvision RetinaNetHead(256, 9 anchors, 91 classes), v1 (no norm: convs with bias), shared over levels."""

    def __init__(self) -> None:
        super().__init__()

        def tower():
            return nn.Sequential(*(nn.Sequential(nn.Conv2d(256, 256, 3, padding=1), nn.ReLU()) for _ in range(4)))

        self.classification_head = nn.Module()
        self.classification_head.conv = tower()
        self.classification_head.cls_logits = nn.Conv2d(256, 9 * 91, 3, padding=1)
        self.regression_head = nn.Module()
        self.regression_head.conv = tower()
        self.regression_head.bbox_reg = nn.Conv2d(256, 9 * 4, 3, padding=1)

    def forward(self, features):
        for f in features:
            self.classification_head.cls_logits(self.classification_head.conv(f))
            self.regression_head.bbox_reg(self.regression_head.conv(f))


def conv_out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def fpn_level_sizes(image: int) -> list[int]:
    """P3..P7 of a ResNet-50 FPN: strides 8..32 from the backbone, P6/P7 by 3x3 stride-2 convs."""
    c = conv_out(conv_out(image, 7, 2, 3), 3, 2, 1)  # stem conv and maxpool: stride 4
    sizes = []
    for _ in range(3):  # layer2..layer4: 3x3 stride 2 pad 1
        c = conv_out(c, 3, 2, 1)
        sizes.append(c)
    for _ in range(2):  # P6, P7
        sizes.append(conv_out(sizes[-1], 3, 2, 1))
    return sizes


class CNBlock(nn.Module):
    """torchvision CNBlock with its two Linear layers written as the equivalent 1x1 convs.

    Indices follow torchvision's ``block`` Sequential (0 depthwise conv, 3 and 5
    the Linear layers); the placeholders stand for the permute/norm/GELU modules.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), nn.Identity(), nn.Identity(),
                                   nn.Conv2d(dim, 4 * dim, 1), nn.Identity(), nn.Conv2d(4 * dim, dim, 1))

    def forward(self, x):
        return x + self.block(x)


class ConvNeXtTiny(nn.Module):
    """torchvision convnext_tiny: features.0.0 stem, features.{1,3,5,7} stages, features.{2,4,6}.1 downsample."""

    def __init__(self) -> None:
        super().__init__()
        dims, depths = [96, 192, 384, 768], [3, 3, 9, 3]
        stages: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, 96, 4, 4))]
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            if i > 0:
                stages.append(nn.Sequential(nn.Identity(), nn.Conv2d(dims[i - 1], dim, 2, 2)))
            stages.append(nn.Sequential(*(CNBlock(dim) for _ in range(depth))))
        self.features = nn.Sequential(*stages)

    def forward(self, x):
        return self.features(x)


def regnet_widths(depth: int, w_0: int, w_a: float, w_m: float, group_width: int) -> tuple[list[int], list[int]]:
    """Stage widths and depths of a RegNet, by torchvision's ``BlockParams.from_init_params`` rule (written
    here from the paper's quantized linear parametrization: widths w_0 * w_m^round(log_{w_m}(u_j / w_0)))."""
    capacity = [round(math.log((w_0 + w_a * j) / w_0) / math.log(w_m)) for j in range(depth)]
    block_widths = [int(round(w_0 * w_m ** c / 8)) * 8 for c in capacity]
    stage_widths = list(dict.fromkeys(block_widths))
    depths = [block_widths.count(w) for w in stage_widths]
    # widths divisible by the group width (torchvision's _make_divisible, with groups no wider than the stage)
    groups = [min(group_width, w) for w in stage_widths]
    adjusted = [max(g, int(w + g / 2) // g * g) for w, g in zip(stage_widths, groups)]
    return [a + g if a < 0.9 * w else a for a, w, g in zip(adjusted, stage_widths, groups)], depths


class RegNetGroupedConvs(nn.Module):
    """The grouped 3x3 (``f.b``) conv of every RegNet block: a stage's first strides 2, from the 112x112 stem."""

    def __init__(self, widths: list[int], depths: list[int], group_width: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList(
            nn.ModuleList(nn.Conv2d(w, w, 3, 2 if b == 0 else 1, 1, groups=w // group_width, bias=False)
                          for b in range(depth)) for w, depth in zip(widths, depths))

    def forward(self, x):
        size = x.shape[-1]
        for stage in self.stages:
            h = x.new_empty(x.shape[0], stage[0].in_channels, size, size)  # what the stage's 1x1 ``a`` conv gives
            for conv in stage:
                h = conv(h)
            size = h.shape[-1]


class ResNeXtStage(nn.Module):
    """resnext50_32x4d's four stages on the stem's 56x56 output, then two RegNets' grouped 3x3 convs."""

    def __init__(self) -> None:
        super().__init__()
        self.resnext = ResNet50(groups=32, base_width=4)
        self.regnets = nn.ModuleList(RegNetGroupedConvs(*regnet_widths(*params), params[-1])
                                     for params in ((16, 48, 27.89, 2.09, 8), (27, 48, 20.71, 2.65, 24)))

    def forward(self, x, stem):
        self.resnext.stages(x)
        for regnet in self.regnets:
            regnet(stem)


class Conv2Plus1D(nn.Sequential):
    """torchvision Conv2Plus1D: a (1,3,3) spatial conv to ``mid`` channels, [BN, ReLU], a (3,1,1) temporal conv."""

    def __init__(self, cin: int, cout: int, mid: int, stride: int = 1) -> None:
        super().__init__(nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False),
                         nn.Identity(), nn.Identity(),
                         nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False))


class VideoBasicBlock(nn.Module):
    """torchvision video BasicBlock with Conv2Plus1D: one midplanes count for both of its convs."""

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        mid = cin * planes * 27 // (cin * 9 + 3 * planes)
        self.conv1 = nn.Sequential(Conv2Plus1D(cin, planes, mid, stride))
        self.conv2 = nn.Sequential(Conv2Plus1D(planes, planes, mid))
        self.downsample = nn.Sequential(nn.Conv3d(cin, planes, 1, stride, bias=False)) \
            if stride != 1 or cin != planes else None

    def forward(self, x):
        out = self.conv2(self.conv1(x))
        return out + (x if self.downsample is None else self.downsample(x))


class R2Plus1D18(nn.Module):
    """torchvision r2plus1d_18: R2Plus1dStem ((1,7,7) then (3,1,1)), four stages of two BasicBlocks."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False), nn.Identity(),
                                  nn.Identity(), nn.Conv3d(45, 64, (3, 1, 1), 1, (1, 0, 0), bias=False))
        cin = 64
        for i, planes in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(VideoBasicBlock(cin, planes, stride),
                                                         VideoBasicBlock(planes, planes, 1)))
            cin = planes

    def forward(self, x):
        return self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))


class CausalConv3d(nn.Module):
    """diffusers HunyuanVideoCausalConv3d: replicate-pad two frames in front and one pixel around, then an
    unpadded Conv3d (a 1x1x1 conv pads nothing)."""

    def __init__(self, cin: int, cout: int, kernel: int = 3) -> None:
        super().__init__()
        self.pad = (kernel // 2,) * 4 + (kernel - 1, 0)
        self.conv = nn.Conv3d(cin, cout, kernel)

    def forward(self, x):
        return self.conv(F.pad(x, self.pad, mode="replicate"))


class CausalResnet(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = CausalConv3d(cin, cout)
        self.conv2 = CausalConv3d(cout, cout)
        self.conv_shortcut = CausalConv3d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv2(self.conv1(x))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class CausalUpsample(nn.Module):
    """HunyuanVideoUpsampleCausal3D: 2x in space; with ``time``, 2x in time too except the first frame."""

    def __init__(self, channels: int, time: bool) -> None:
        super().__init__()
        self.time = time
        self.conv = CausalConv3d(channels, channels)

    def forward(self, x):
        if self.time:
            first = F.interpolate(x[:, :, :1], scale_factor=(1, 2, 2), mode="nearest")
            x = torch.cat([first, F.interpolate(x[:, :, 1:], scale_factor=(2, 2, 2), mode="nearest")], dim=2)
        else:
            x = F.interpolate(x, scale_factor=(1, 2, 2), mode="nearest")
        return self.conv(x)


class HunyuanVideoDecoder(nn.Module):
    """The HunyuanVideo VAE decoder's convolutions: conv_in, mid block (2 resnets), 4 up blocks of 3 resnets
    (space upsampled after blocks 0..2, time after 1 and 2), conv_out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_in = CausalConv3d(16, 512)
        self.mid = nn.Sequential(CausalResnet(512, 512), CausalResnet(512, 512))
        blocks, cin = [], 512
        for i, cout in enumerate((512, 512, 256, 128)):
            blocks += [CausalResnet(cin if r == 0 else cout, cout) for r in range(3)]
            if i < 3:
                blocks.append(CausalUpsample(cout, time=i in (1, 2)))
            cin = cout
        self.up_blocks = nn.Sequential(*blocks)
        self.conv_out = CausalConv3d(128, 3)

    def forward(self, z):
        return self.conv_out(self.up_blocks(self.mid(self.conv_in(z))))


class UNetDecoder(nn.Module):
    """milesial/Pytorch-UNet's decoder (bilinear=False): per Up a ConvTranspose2d k2 s2 to C/2, the skip
    concatenated, a DoubleConv C -> C/2 -> C/2; then the 1x1 OutConv."""

    def __init__(self) -> None:
        super().__init__()
        self.ups = nn.ModuleList(nn.ModuleDict({
            "up": nn.ConvTranspose2d(c, c // 2, 2, 2),
            "conv": nn.Sequential(nn.Conv2d(c, c // 2, 3, padding=1, bias=False),
                                  nn.Conv2d(c // 2, c // 2, 3, padding=1, bias=False))}) for c in (1024, 512, 256, 128))
        self.outc = nn.Conv2d(64, 2, 1)

    def forward(self, x):
        for up in self.ups:
            y = up["up"](x)
            x = up["conv"](torch.cat([y, y], dim=1))  # the skip has the up-conv's shape
        return self.outc(x)


class Pix2PixDecoder(nn.Module):
    """pix2pix unet_256's up-convs (k4 s2 p1), innermost first, each reading the previous output and its skip."""

    def __init__(self) -> None:
        super().__init__()
        outer = [512, 512, 512, 512, 256, 128, 64, 3]
        inner = [512] + [2 * c for c in outer[:-1]]
        self.upconvs = nn.ModuleList(nn.ConvTranspose2d(i, o, 4, 2, 1, bias=o == 3) for i, o in zip(inner, outer))

    def forward(self, x):
        for i, upconv in enumerate(self.upconvs):
            x = upconv(x if i == 0 else torch.cat([x, x], dim=1))  # the skip has the up-conv's shape
        return x


class SegHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unet = UNetDecoder()
        self.pix2pix = Pix2PixDecoder()

    def forward(self, unet_bottom, pix2pix_bottom):
        self.unet(unet_bottom)
        self.pix2pix(pix2pix_bottom)


class AudioFrontEnd(nn.Module):
    """wav2vec 2.0's feature encoder, a long k3 s2 conv, and 16 Conformer convolution modules."""

    def __init__(self) -> None:
        super().__init__()
        self.feature_extractor = nn.Sequential(
            *(nn.Conv1d(1 if i == 0 else 512, 512, k, s, bias=False)
              for i, (k, s) in enumerate([(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2)))
        self.long = nn.Conv1d(512, 512, 3, 2, bias=False)
        self.conv_modules = nn.ModuleList(
            nn.Sequential(nn.Conv1d(256, 512, 1), nn.GLU(dim=1), nn.Conv1d(256, 256, 31, padding=15, groups=256),
                          nn.Identity(), nn.Identity(), nn.Conv1d(256, 256, 1)) for _ in range(16))

    def forward(self, wave, long, frames):
        self.feature_extractor(wave)
        self.long(long)
        for module in self.conv_modules:
            frames = module(frames)


def _skeleton(name: str):
    """(model, example input) of the skeleton of suite ``name``, on the meta device."""
    with torch.device("meta"):
        if name == "resnet50":
            return ResNet50(), torch.empty(1, 3, 224, 224)
        if name == "sd_vae_encoder":
            return VaeEncode(), torch.empty(1, 3, 512, 512)
        if name == "sd_vae_decoder":
            return VaeDecode(), torch.empty(1, 4, 64, 64)
        if name == "retinanet_head":
            return RetinaNetHead(), ([torch.empty(1, 256, s, s) for s in fpn_level_sizes(800)],)
        if name == "convnext_block":
            return ConvNeXtTiny(), torch.empty(1, 3, 224, 224)
        if name == "resnext_stage":
            return ResNeXtStage(), (torch.empty(1, 64, 56, 56), torch.empty(1, 32, 112, 112))
        if name == "video_resnet":
            return R2Plus1D18(), torch.empty(1, 3, 16, 112, 112)
        if name == "vae3d_decoder":
            return HunyuanVideoDecoder(), torch.empty(1, 16, 5, 32, 32)
        if name == "seg_head_transposed":
            return SegHeads(), (torch.empty(1, 1024, 32, 32), torch.empty(1, 512, 1, 1))
        if name == "audio_frontend":
            return AudioFrontEnd(), (torch.empty(1, 1, 16000), torch.empty(1, 512, 10000), torch.empty(1, 256, 250))
    raise KeyError(name)


def _geometry(layer_or_problem) -> tuple:
    layer = layer_or_problem
    if isinstance(layer, ConvProblem):
        layer = SuiteLayer.from_problem("", layer)
    return (layer.in_channels, layer.out_channels, layer.input_size, layer.filter_size, layer.stride, layer.padding,
            layer.dilation, layer.groups, layer.bias, layer.transposed)


def _transposed_calls(model: nn.Module) -> tuple[list[SuiteLayer], list]:
    """Forward hooks that record each ``ConvTranspose*d`` call as a transposed suite layer, written from the
    module's arguments and the call's output size (independently of conv_core.frontend.capture); and the hooks."""
    found: list[SuiteLayer] = []

    def hook(module, args, out):
        layer = SuiteLayer("", module.out_channels, module.in_channels, tuple(out.shape[2:]), module.kernel_size,
                           module.stride, tuple((p, p) for p in module.padding), module.dilation, module.groups,
                           module.bias is not None, transposed=True)
        assert layer.output_padding == module.output_padding
        assert layer.problem(1).output_size == tuple(args[0].shape[2:])
        found.append(layer)

    return found, [m.register_forward_hook(hook) for m in model.modules()
                   if isinstance(m, nn.modules.conv._ConvTransposeNd)]


# ---- the suites match the models -----------------------------------------------------------------


def test_available_suites():
    assert available_suites() == SUITES


@pytest.mark.parametrize("name", SUITES)
def test_suite_loads_and_every_layer_is_a_problem(name):
    suite = load_suite(name)
    assert isinstance(suite, Suite)
    assert suite.name == name and suite.description and suite.default_batch >= 1
    assert suite.layers and all(isinstance(layer, SuiteLayer) for layer in suite.layers)
    names = [layer.name for layer in suite.layers]
    assert len(set(names)) == len(names), "layer names are unique"
    geometries = [_geometry(layer) for layer in suite.layers]
    assert len(set(geometries)) == len(geometries), "each distinct layer appears once (with a count)"
    for layer in suite.layers:
        for direction in ("fwd", "bwd_data", "bwd_weight"):
            problem = layer.problem(suite.default_batch, direction=direction)
            assert problem.batch == suite.default_batch


@pytest.mark.parametrize("name", SUITES)
def test_suite_matches_the_captured_skeleton(name):
    model, example = _skeleton(name)
    transposed, hooks = _transposed_calls(model)
    captured = capture_shapes(model, example)
    for h in hooks:
        h.remove()
    expected = collections.Counter(_geometry(layer) for layer in transposed)
    for layer in captured:
        if not getattr(layer, "transposed", False):  # transposed calls come from the hooks, captured or not
            expected[_geometry(layer.problem)] += layer.count
    actual = {_geometry(layer): layer.count for layer in load_suite(name).layers}
    assert actual == dict(expected)


def test_capture_records_transposed_calls_as_the_suites_store_them():
    """conv_core.frontend.capture's transposed layers are the hooks' (the suite's form), but for the bias, which their
    problems (a convolution's bwd_data) cannot carry."""
    model, example = _skeleton("seg_head_transposed")
    hooked, hooks = _transposed_calls(model)
    captured = capture_shapes(model, example)
    for h in hooks:
        h.remove()
    from_capture = collections.Counter()
    for layer in captured:
        if layer.transposed:
            from_capture[_geometry(SuiteLayer.from_captured(layer))] += layer.count
    assert from_capture == collections.Counter(_geometry(dataclasses.replace(layer, bias=False)) for layer in hooked)


# Total convolutions per forward pass, counted by hand from the architectures.
TOTALS = {
    # stem + (3 + 4 + 6 + 3) bottlenecks x 3 convs + 4 downsample convs
    "resnet50": 1 + 16 * 3 + 4,
    # conv_in; 4 down blocks x 2 resnets x 2 convs; 2 shortcuts (128->256, 256->512); 3 downsamplers;
    # mid block 2 resnets x 2 convs; conv_out; quant_conv
    "sd_vae_encoder": 1 + 16 + 2 + 3 + 4 + 1 + 1,
    # post_quant_conv; conv_in; mid 4; 4 up blocks x 3 resnets x 2 convs; 2 shortcuts (512->256, 256->128);
    # 3 upsamplers; conv_out
    "sd_vae_decoder": 1 + 1 + 4 + 24 + 2 + 3 + 1,
    # 5 levels x (4 + 1 classification convs + 4 + 1 regression convs)
    "retinanet_head": 5 * 10,
    # stem + (3 + 3 + 9 + 3) blocks x (depthwise + 2 pointwise) + 3 downsample convs
    "convnext_block": 1 + 18 * 3 + 3,
    # resnet50 without its stem; regnet_y_400mf's 1+3+6+6 and regnet_y_1_6gf's 2+6+17+2 blocks, one f.b each
    "resnext_stage": 16 * 3 + 4 + 16 + 27,
    # stem 2; 8 BasicBlocks x 2 Conv2Plus1D x 2 convs; 3 downsample convs
    "video_resnet": 2 + 8 * 4 + 3,
    # conv_in; mid 2 resnets x 2; 4 up blocks x 3 resnets x 2; 2 shortcuts; 3 upsamplers; conv_out
    "vae3d_decoder": 1 + 4 + 24 + 2 + 3 + 1,
    # UNet: 4 x (up-conv + 2 convs) + outc; pix2pix unet_256: 8 up-convs
    "seg_head_transposed": 4 * 3 + 1 + 8,
    # wav2vec2's 7 feature convs; the long conv; 16 Conformer layers x 3 convs
    "audio_frontend": 7 + 1 + 16 * 3,
}


@pytest.mark.parametrize("name", SUITES)
def test_total_convolution_counts(name):
    assert load_suite(name).total_count == TOTALS[name]


def test_totals_are_the_expected_numbers():
    assert TOTALS == {"resnet50": 53, "sd_vae_encoder": 28, "sd_vae_decoder": 36, "retinanet_head": 50,
                      "convnext_block": 58, "resnext_stage": 95, "video_resnet": 37, "vae3d_decoder": 35,
                      "seg_head_transposed": 21, "audio_frontend": 56}


@pytest.mark.parametrize("name", SUITES)
def test_every_layer_has_an_output_and_transposed_layers_a_valid_output_padding(name):
    """A transposed layer's implied output_padding is what PyTorch accepts: in [0, max(stride, dilation))."""
    for layer in load_suite(name).layers:
        conv_output = layer.problem(1, direction="bwd_data" if layer.transposed else "fwd").output_size
        assert all(o >= 1 for o in conv_output), layer.name
        if not layer.transposed:
            continue
        for size, o, k, s, (lo, hi), d in zip(layer.input_size, conv_output, layer.filter_size, layer.stride,
                                              layer.padding, layer.dilation):
            # ConvTranspose output: (o - 1) s - padding + d (k - 1) + output_padding + 1 == the stored input size
            output_padding = size - ((o - 1) * s - lo - hi + d * (k - 1) + 1)
            assert 0 <= output_padding < max(s, d), layer.name
        assert layer.output_padding == tuple(
            size - ((o - 1) * s - lo - hi + d * (k - 1) + 1) for size, o, k, s, (lo, hi), d in
            zip(layer.input_size, conv_output, layer.filter_size, layer.stride, layer.padding, layer.dilation))


def _find(suite_name: str, **fields) -> SuiteLayer:
    hits = [layer for layer in load_suite(suite_name).layers
            if all(getattr(layer, k) == v for k, v in fields.items())]
    assert len(hits) == 1, (fields, hits)
    return hits[0]


def test_resnet50_layers():
    stem = _find("resnet50", in_channels=3)
    assert (stem.out_channels, stem.input_size, stem.filter_size, stem.stride, stem.padding, stem.bias) == (
        64, (224, 224), (7, 7), (2, 2), ((3, 3), (3, 3)), False)
    assert stem.problem(1).output_size == (112, 112)
    suite = load_suite("resnet50")
    assert not any(layer.bias for layer in suite.layers)
    # v1.5: every stride-2 layer after the stem is a 3x3 (conv2) or a 1x1 downsample; they halve 56 -> 28 -> 14 -> 7.
    strided = [layer for layer in suite.layers[1:] if layer.stride != (1, 1)]
    assert sorted((layer.filter_size[0], layer.input_size[0], layer.problem(1).output_size[0]) for layer in strided) \
        == [(1, 14, 7), (1, 28, 14), (1, 56, 28), (3, 14, 7), (3, 28, 14), (3, 56, 28)]
    # Spatial sizes chain: every non-stem layer reads 56 (after the maxpool) or what a strided layer wrote.
    produced = {56} | {layer.problem(1).output_size[0] for layer in strided}
    assert {layer.input_size[0] for layer in suite.layers[1:]} == produced == {56, 28, 14, 7}
    # Channel counts chain: each stage's 1x1 convs go between width and 4 x width.
    three_by_three = {layer.in_channels: layer.count for layer in suite.layers if layer.filter_size == (3, 3)
                      and layer.stride == (1, 1)}
    assert three_by_three == {64: 3, 128: 3, 256: 5, 512: 2}


def test_sd_vae_layers():
    down = [layer for layer in load_suite("sd_vae_encoder").layers if layer.stride == (2, 2)]
    assert sorted((layer.in_channels, layer.input_size[0]) for layer in down) == [(128, 512), (256, 256), (512, 128)]
    for layer in down:
        assert layer.padding == ((0, 1), (0, 1)) and layer.filter_size == (3, 3)
        assert layer.problem(1).output_size == tuple(s // 2 for s in layer.input_size)
    enc = load_suite("sd_vae_encoder")
    assert _find("sd_vae_encoder", in_channels=512, out_channels=8, filter_size=(3, 3)).input_size == (64, 64)
    assert _find("sd_vae_encoder", in_channels=8, out_channels=8).filter_size == (1, 1)
    assert all(layer.bias for layer in enc.layers)
    dec = load_suite("sd_vae_decoder")
    assert _find("sd_vae_decoder", in_channels=4, out_channels=4).filter_size == (1, 1)
    assert _find("sd_vae_decoder", in_channels=4, out_channels=512).input_size == (64, 64)
    assert _find("sd_vae_decoder", in_channels=128, out_channels=3).input_size == (512, 512)
    shortcuts = [(layer.in_channels, layer.out_channels, layer.input_size[0]) for layer in dec.layers
                 if layer.filter_size == (1, 1) and layer.in_channels != 4]
    assert sorted(shortcuts) == [(256, 128, 512), (512, 256, 256)]
    assert sum(layer.count for layer in dec.layers if layer.input_size == (512, 512)) == 1 + 6 + 1 + 1


def test_retinanet_head_layers():
    assert fpn_level_sizes(800) == [100, 50, 25, 13, 7]
    suite = load_suite("retinanet_head")
    for size in (100, 50, 25, 13, 7):
        at = {layer.out_channels: layer.count for layer in suite.layers if layer.input_size == (size, size)}
        assert at == {256: 8, 819: 1, 36: 1}
    assert all(layer.filter_size == (3, 3) and layer.padding == ((1, 1), (1, 1)) for layer in suite.layers)


def test_convnext_layers():
    suite = load_suite("convnext_block")
    depthwise = {layer.in_channels: (layer.input_size[0], layer.count) for layer in suite.layers if layer.groups > 1}
    assert depthwise == {96: (56, 3), 192: (28, 3), 384: (14, 9), 768: (7, 3)}
    assert all(layer.groups == layer.in_channels and layer.filter_size == (7, 7) for layer in suite.layers
               if layer.groups > 1)
    stem = _find("convnext_block", in_channels=3)
    assert (stem.filter_size, stem.stride, stem.problem(1).output_size) == ((4, 4), (4, 4), (56, 56))
    downsample = sorted((layer.in_channels, layer.out_channels, layer.input_size[0]) for layer in suite.layers
                        if layer.filter_size == (2, 2))
    assert downsample == [(96, 192, 56), (192, 384, 28), (384, 768, 14)]
    # Real Conv2d modules in torchvision's convnext_tiny (the pointwise layers there are nn.Linear): 22.
    assert sum(layer.count for layer in suite.layers if layer.filter_size != (1, 1)) == 22


def test_resnext_and_regnet_layers():
    suite = load_suite("resnext_stage")
    resnext = [layer for layer in suite.layers if layer.name.startswith("resnext50_32x4d/") and layer.groups > 1]
    assert sorted({(layer.in_channels // layer.groups, layer.problem(1).output_size[0]) for layer in resnext}) == [
        (4, 56), (8, 28), (16, 14), (32, 7)]
    assert all(layer.groups == 32 for layer in resnext)
    assert regnet_widths(16, 48, 27.89, 2.09, 8) == ([48, 104, 208, 440], [1, 3, 6, 6])
    assert regnet_widths(27, 48, 20.71, 2.65, 24) == ([48, 120, 336, 888], [2, 6, 17, 2])
    per_group = {layer.name.split("/")[0]: layer.in_channels // layer.groups for layer in suite.layers
                 if layer.name.startswith("regnet")}
    assert per_group == {"regnet_y_400mf": 8, "regnet_y_1_6gf": 24}


def test_video_resnet_layers():
    suite = load_suite("video_resnet")
    assert all(len(layer.input_size) == 3 for layer in suite.layers)
    spatial = {layer.out_channels for layer in suite.layers if layer.filter_size == (1, 3, 3)}
    assert spatial == {144, 230, 288, 460, 576, 921, 1152}  # r2plus1d_18's midplanes
    temporal = [layer for layer in suite.layers if layer.stride == (2, 1, 1)]
    assert sorted(layer.problem(1).output_size for layer in temporal) == [(2, 7, 7), (4, 14, 14), (8, 28, 28)]
    assert _find("video_resnet", in_channels=3).problem(1).output_size == (16, 56, 56)


def test_vae3d_decoder_layers():
    suite = load_suite("vae3d_decoder")
    for layer in suite.layers:
        assert layer.padding == ((0, 0),) * 3 and layer.bias
        if layer.filter_size == (3, 3, 3):  # causal: two frames in front, one pixel around, padded before the conv
            t, h, w = layer.problem(1).output_size
            assert layer.input_size == (t + 2, h + 2, w + 2)
    assert _find("vae3d_decoder", in_channels=16).problem(1).output_size == (5, 32, 32)
    assert _find("vae3d_decoder", out_channels=3).problem(1).output_size == (17, 256, 256)


def test_seg_head_transposed_layers():
    suite = load_suite("seg_head_transposed")
    transposed = [layer for layer in suite.layers if layer.transposed]
    assert len(transposed) == 12 and transposed_layers(suite) == {layer.name for layer in transposed}
    unet = sorted((layer.out_channels, layer.in_channels, layer.input_size[0]) for layer in transposed
                  if layer.filter_size == (2, 2))  # ConvTranspose2d(in, out): (its in, its out, its output size)
    assert unet == [(128, 64, 512), (256, 128, 256), (512, 256, 128), (1024, 512, 64)]
    pix2pix = [layer for layer in transposed if layer.filter_size == (4, 4)]
    assert all(layer.stride == (2, 2) and layer.padding == ((1, 1), (1, 1)) for layer in pix2pix)
    assert sorted(layer.input_size[0] for layer in pix2pix) == [2, 4, 8, 16, 32, 64, 128, 256]
    assert [layer.bias for layer in pix2pix if layer.in_channels == 3] == [True]


def test_audio_frontend_layers():
    suite = load_suite("audio_frontend")
    assert all(len(layer.input_size) == 1 for layer in suite.layers)
    encoder = [layer for layer in suite.layers if layer.name.startswith("wav2vec2/")]
    sizes = [layer.input_size[0] for layer in encoder] + [encoder[-1].problem(1).output_size[0]]
    assert sizes == [16000, 3199, 1599, 799, 399, 199, 99, 49]
    depthwise = _find("audio_frontend", groups=256)
    assert (depthwise.filter_size, depthwise.padding, depthwise.count) == ((31,), ((15, 15),), 16)


# ---- the API -------------------------------------------------------------------------------------


def test_suite_problems_defaults_and_options():
    pairs = suite_problems("resnet50")
    suite = load_suite("resnet50")
    assert [name for name, _ in pairs] == [layer.name for layer in suite.layers]
    first = pairs[0][1]
    assert (first.batch, first.dtype, first.layout, first.direction, first.arch, first.bias) == (
        suite.default_batch, "bfloat16", "channels_last", "fwd", "cpu", False)
    pairs = suite_problems("sd_vae_decoder", batch=3, dtype="float16", layout="channels_first",
                           direction="bwd_weight", arch="sm_90")
    p = pairs[0][1]
    assert (p.batch, p.dtype, p.layout, p.direction, p.arch, p.bias) == (3, "float16", "channels_first",
                                                                         "bwd_weight", "sm_90", False)
    assert all(ConvProblem.from_key(p.key) == p for _, p in pairs)


def test_unknown_suite_names_the_available_ones():
    with pytest.raises(ValueError, match="resnet50"):
        load_suite("no_such_model")
    with pytest.raises(ValueError, match="unknown suite"):
        load_suite("../problem")


def test_load_suite_from_a_file_and_bad_files(tmp_path):
    suite = load_suite("retinanet_head")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(suite.to_json()))
    assert load_suite(str(path)) == suite
    raw = suite.to_json()
    raw["layers"][0]["groups"] = 7  # 256 channels are not divisible by 7
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="layer 0.*groups"):
        load_suite(str(path))
    raw = suite.to_json()
    del raw["layers"][1]["count"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="missing fields \\['count'\\]"):
        load_suite(str(path))


def test_layer_from_captured_problem_round_trips():
    problem = ConvProblem("fwd", 8, 64, 128, (28, 28), (3, 3), (2, 2), ((0, 1), (0, 1)), (1, 1), groups=2,
                          bias=True, dtype="float16", layout="channels_last")
    layer = SuiteLayer.from_problem("x", problem, count=3)
    assert layer.problem(8, dtype="float16") == problem.replace(arch="cpu")
    assert layer.count == 3


def test_transposed_layer_directions_map_onto_the_convolution():
    """ConvTranspose2d(64, 32, 4, 2, 1) from 9x9 to 18x18: stored as Conv2d(32, 64, 4, 2, 1) on 18x18."""
    layer = SuiteLayer("up", 32, 64, (18, 18), (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1), bias=True, transposed=True)
    conv = SuiteLayer("up", 32, 64, (18, 18), (4, 4), (2, 2), ((1, 1), (1, 1)), (1, 1))
    for direction, conv_direction in (("fwd", "bwd_data"), ("bwd_data", "fwd"), ("bwd_weight", "bwd_weight")):
        assert TRANSPOSED_DIRECTIONS[direction] == conv_direction
        assert layer.problem(4, direction=direction) == conv.problem(4, direction=conv_direction)
    assert not layer.problem(4, direction="bwd_data").bias  # the bias is the transposed output's
    assert layer.problem(4).operand_shapes[0] == (4, 64, 9, 9)  # what F.conv_transpose2d reads
    assert layer.output_padding == (0, 0)
    assert SuiteLayer("odd", 8, 8, (17,), (3,), (2,), ((1, 1),), (1,), transposed=True).output_padding == (0,)
    assert SuiteLayer("even", 8, 8, (18,), (3,), (2,), ((1, 1),), (1,), transposed=True).output_padding == (1,)
    assert direction_label("fwd", True) == "fwd (transposed)" and direction_label("fwd") == "fwd"
    assert layer_direction("fwd", True) == "bwd_data" and layer_direction("fwd") == "fwd"


def test_transposed_field_round_trips_and_is_written_only_when_true(tmp_path):
    suite = load_suite("seg_head_transposed")
    raw = suite.to_json()
    assert [layer.get("transposed") for layer in raw["layers"]] == [True if layer.transposed else None
                                                                   for layer in suite.layers]
    path = tmp_path / "seg.json"
    path.write_text(json.dumps(raw))
    assert load_suite(str(path)) == suite
    raw["layers"][0]["transposed"] = "yes"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="layer 0.*transposed='yes'"):
        load_suite(str(path))
    assert transposed_layers("resnet50") == frozenset()
    assert [p.direction for name, p in suite_problems(suite, direction="fwd")
            if name in transposed_layers(suite)] == ["bwd_data"] * 12


def test_problems_from_shape():
    [(name, p)] = problems_from_shape("n32 c64 k64 i56x56 f3x3 s1 p1 d1 g1")
    assert (p.batch, p.in_channels, p.out_channels, p.input_size, p.filter_size, p.padding, p.groups) == (
        32, 64, 64, (56, 56), (3, 3), ((1, 1), (1, 1)), 1)
    assert (p.dtype, p.layout, p.direction, p.bias) == ("bfloat16", "channels_last", "fwd", False)
    assert name == p.geometry_key
    [(_, p)] = problems_from_shape("c3 k8 i17 f4", batch=4, dtype="float32", direction="bwd_data")
    assert (p.batch, p.ndim, p.filter_size, p.stride, p.padding, p.direction) == (
        4, 1, (4,), (1,), ((0, 0),), "bwd_data")
    [(_, p)] = problems_from_shape("c8 k8 i9x10x11 f3 s2x1x1 p0.1x1x2.0 g4 b1")
    assert (p.stride, p.padding, p.groups, p.bias) == ((2, 1, 1), ((0, 1), (1, 1), (2, 0)), 4, True)
    key = "bwd_weight n2 c4 k8 g1 i9x9 f3x3 s1x1 p1.1x1.1 d1x1 f16.f16.f16 cl b0 a- sm_90"
    [(_, p)] = problems_from_shape(key)
    assert p == ConvProblem.from_key(key)


@pytest.mark.parametrize("text, message", [
    ("c64 k64 i56x56", "lacks f"),
    ("n32 k64 i56x56 f3x3", "lacks c"),
    ("c64 k64 i56x56 f3x3 q1", "cannot read 'q1'"),
    ("c64 k64 i56x56 f3x3 s1 s2", "given twice"),
    ("c64 k64 i56x56 f3x3x3", "expected 1 or 2 sizes"),
    ("c64 k64 i56x56 f3x3 g3", "not divisible by groups"),
    ("c64 k64 i56x56 f3x3 b2", "bias is b0 or b1"),
])
def test_problems_from_shape_errors(text, message):
    with pytest.raises(ValueError, match=message):
        problems_from_shape(text)


def test_a_captured_transposed_layer_becomes_a_suite_layer_with_the_same_problems():
    """SuiteLayer.from_captured keeps a ConvTranspose2d's convolution geometry and flag: the suite layer's problem
    in each direction is the one capture_shapes records for the model's call."""
    torch.manual_seed(0)
    model = conv_core.convert(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1),
                                            nn.ConvTranspose2d(6, 8, 3, stride=2, padding=1, output_padding=1,
                                                               groups=2)))
    x = torch.randn(2, 3, 8, 8)
    stem, up = capture_shapes(model, x)
    layer = SuiteLayer.from_captured(up)
    assert layer.transposed and (layer.in_channels, layer.input_size) == (8, (16, 16))
    assert layer.output_padding == (1, 1)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        assert layer.problem(2, dtype="float32", layout="channels_first", direction=direction) == \
            capture_shapes(model, x, direction=direction)[1].problem
    assert not SuiteLayer.from_captured(stem).transposed
