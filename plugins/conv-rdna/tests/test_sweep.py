"""The offline sweep's choice of winners (the timing itself runs on a GPU only)."""

from conv_rdna import sweep

FAST = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
SLOW = {**FAST, "num_warps": 4}
WRONG = {**FAST, "BLOCK_N": 256}


def row(family, layer, kernel, raw, us, error=None):
    return {"family": family, "layer": layer, "kernel": kernel, "raw": raw, "us": us, "error": error}


def test_winners_are_the_fastest_correct_configurations():
    results = [
        row("implicit_gemm", "L1", "implicit_gemm", SLOW, 20.0),
        row("implicit_gemm", "L1", "implicit_gemm", FAST, 10.0),
        row("implicit_gemm", "L1", "implicit_gemm", WRONG, None, "MISMATCH"),  # failed the gate: never a winner
        row("bwd_weight", "L2", "bwd_weight_atomic", WRONG, 1.0),  # not the deterministic kernel's
        row("bwd_weight", "L2", "bwd_weight_split", SLOW, 5.0),
    ]
    assert sweep.winners(results) == {"implicit_gemm": {"L1": FAST}, "bwd_weight": {"L2": SLOW}}


def test_every_swept_configuration_is_valid_and_fits():
    from conv_rdna import configs

    for arch in ("sm_90",):
        limit = configs.shared_memory_limit(arch)
        for family, entries in sweep.sweep_space(arch).items():
            assert family in configs.FAMILIES
            for raw in entries:
                assert configs.TileConfig.from_dict(raw).shared_bytes("bfloat16") <= limit
