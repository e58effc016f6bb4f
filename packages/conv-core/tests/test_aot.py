"""The ahead-of-time compile helpers the Triton backends share (conv_core.testing.aot)."""

from conv_core.testing import aot


def test_scalar_arguments_are_specialized_as_tritons_jit_does():
    assert aot.scalar_argument(1) == ("constexpr", False)
    assert aot.scalar_argument(48) == ("i32", True)
    assert aot.scalar_argument(7) == ("i32", False)
    assert aot.scalar_argument(0) == ("i32", True)
    assert aot.scalar_argument(2**31) == ("i64", True)
    assert aot.scalar_argument(-(2**31) - 3) == ("i64", False)


def test_a_launch_is_specialized_argument_by_argument():
    """Pointers keep their type and get the divisibility attribute when aligned; integers equal to 1 become
    constexprs; everything else is a constexpr of the launch."""
    names = ["x_ptr", "desc", "M", "ONE", "K", "BLOCK"]
    signature, consts, attrs = aot.specialize(names, {"x_ptr": ("*bf16", True), "desc": ("tensordesc", False)},
                                              {"M": 32, "ONE": 1, "K": 7}, {"BLOCK": 64})
    assert signature == {"x_ptr": "*bf16", "desc": "tensordesc", "M": "i32", "ONE": "constexpr", "K": "i32",
                         "BLOCK": "constexpr"}
    assert consts == {"ONE": 1, "BLOCK": 64}
    assert attrs == {(0,): aot.DIVISIBLE, (2,): aot.DIVISIBLE}


def test_unspecialized_integers_keep_their_type_alone():
    """A kernel's ``do_not_specialize`` parameters: neither a constant for 1 nor divisible for 32 (as the JIT)."""
    assert aot.scalar_argument(1, specialized=False) == ("i32", False)
    assert aot.scalar_argument(32, specialized=False) == ("i32", False)
    assert aot.scalar_argument(2**31, specialized=False) == ("i64", False)
    signature, consts, attrs = aot.specialize(["M", "ONE", "K"], {}, {"M": 32, "ONE": 1, "K": 32}, {},
                                              unspecialized={"M", "ONE"})
    assert signature == {"M": "i32", "ONE": "i32", "K": "i32"} and consts == {} and attrs == {(2,): aot.DIVISIBLE}


def test_ptxas_stats_reads_registers_spills_and_stack():
    log = ("ptxas info    : Used 168 registers, used 1 barriers, 16 bytes stack frame\n"
           "ptxas info    : 8 bytes spill stores, 12 bytes spill loads\n")
    assert aot.ptxas_stats(log) == {"registers": 168, "spill_bytes": 20, "stack_bytes": 16}
    assert aot.ptxas_stats("") == {"registers": -1, "spill_bytes": -1, "stack_bytes": -1}


def test_compile_all_in_this_process_keeps_the_order():
    assert aot.compile_all(lambda job: {"job": job * 2}, [3, 1, 2], workers=1) == [{"job": 6}, {"job": 2}, {"job": 4}]
