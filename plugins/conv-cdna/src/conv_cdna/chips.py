"""What each chip is made of (``data/chips.json``) and what that allows a kernel configuration: how much LDS and how
many registers a tile needs, and how many tiles a compute unit then holds at once.

The rates (``matmul_tflops``, ``copy_tbps``) and the LDS limit are conv-core's facts (:func:`conv_core.arch.spec`),
the ones aten's estimate uses too, so that conv-cdna's estimates and aten's are on one scale.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from conv_core.arch import spec
from conv_core.kit.tables import PackageData
from conv_core.problem import element_size

DATA = PackageData("conv_cdna", "cdna")

#: Waves a SIMD must hold to hide the latency of its loads and matrix instructions (fewer run at that fraction).
HIDING_WAVES = 2
#: Registers a lane needs besides its accumulators and operand fragments: addresses, loop state, masks.
OVERHEAD_REGISTERS = 40


@dataclass(frozen=True)
class Chip:
    """One architecture: ``data/chips.json``'s entry plus conv-core's rates and LDS limit."""

    name: str
    part: str
    compute_units: int
    clock_ghz: float
    peak_matrix_tflops: float
    vector_tflops: float
    warp_size: int
    simds_per_cu: int
    waves_per_simd: int
    registers_per_lane: int
    register_file: int
    l2_bytes_per_clock_per_cu: int
    lds_bytes_per_clock_per_cu: int
    mfma: dict
    amd_options: dict

    @property
    def is_amd(self) -> bool:
        return self.name.startswith("gfx")

    @property
    def lds_bytes(self) -> int:
        return spec(self.name).shared_memory_bytes

    @property
    def matmul_tflops(self) -> float:
        """The achievable matrix rate of the whole device (conv-core's, as aten's estimate takes it)."""
        return spec(self.name).matmul_tflops

    @property
    def copy_tbps(self) -> float:
        return spec(self.name).copy_tbps

    @property
    def launch_us(self) -> float:
        return spec(self.name).launch_us

    def tile_lds_bytes(self, config, dtype: str) -> int:
        """LDS (shared memory) the operand tiles of ``config`` take: on AMD ``num_stages`` 2 keeps one buffer and
        prefetches the next step in registers, 3 keeps two; on NVIDIA every stage is a buffer."""
        buffers = max(config.num_stages - 1, 1) if self.is_amd else max(config.num_stages, 1)
        return (config.block_m + config.block_n) * config.block_k * element_size(dtype) * buffers

    def tile_registers(self, config, dtype: str) -> int:
        """Registers a lane needs for ``config``: its share of the float32 accumulator tile, of the operand
        fragments (twice, where the next step is prefetched in registers) and :data:`OVERHEAD_REGISTERS`."""
        lanes = config.num_warps * self.warp_size
        accumulator = config.block_m * config.block_n / lanes
        fragments = (config.block_m + config.block_n) * config.block_k * element_size(dtype) / 4 / lanes
        prefetched = 2 if self.is_amd and config.num_stages >= 2 else 1
        return math.ceil(accumulator + fragments * prefetched) + OVERHEAD_REGISTERS

    def resident_tiles(self, config, dtype: str) -> int:
        """Workgroups of ``config`` one compute unit holds at once (0: it does not fit), bounded by LDS, by the
        register file of each SIMD and by the waves a SIMD holds."""
        lds = self.lds_bytes // max(self.tile_lds_bytes(config, dtype), 1)
        registers = self.tile_registers(config, dtype)
        if registers > self.registers_per_lane:
            return 0
        waves = min(self.waves_per_simd, self.register_file // (registers * self.warp_size))
        per_simd = math.ceil(config.num_warps / self.simds_per_cu)
        return max(min(lds, waves // per_simd), 0)

    def wave_tile(self, config) -> tuple[int, int]:
        """The part of a ``BLOCK_M x BLOCK_N`` tile one wave computes: the waves split the longer side first."""
        m, n = config.block_m, config.block_n
        for _ in range(int(math.log2(config.num_warps))):
            m, n = (m // 2, n) if m >= n else (m, n // 2)
        return max(m, 1), max(n, 1)

    def operand_rate(self, config, dtype: str) -> float:
        """The matrix rate (flop/s) at which one CU's L2 share can feed ``config``'s workgroup tiles, and its LDS
        each wave's fragments: the arithmetic intensity of a tile (and of a wave's part) times the bandwidth."""
        size, clock = element_size(dtype), self.clock_ghz * 1e9

        def intensity(m: int, n: int) -> float:  # flops per operand byte of one reduction step
            return 2 * m * n / ((m + n) * size)

        return clock * min(self.l2_bytes_per_clock_per_cu * intensity(config.block_m, config.block_n),
                           self.lds_bytes_per_clock_per_cu * intensity(*self.wave_tile(config)))

    def min_block_k(self) -> int:
        """The smallest ``BLOCK_K`` the chip's 16-bit matrix instructions take at the shipped instruction size."""
        size = str(self.amd_options.get("matrix_instr_nonkdim", 16))
        return self.mfma[size]["min_block_k"] if self.mfma else 16


@functools.cache
def chip(name: str) -> Chip:
    """The chip called ``name`` (``gfx90a``, ``gfx942``, ``gfx950`` or ``sm_90``)."""
    return Chip(name=name, **DATA.json("chips.json")["chips"][name])


def chip_names() -> tuple[str, ...]:
    return tuple(DATA.json("chips.json")["chips"])
