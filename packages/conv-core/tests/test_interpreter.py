"""conv_core.interpreter on stand-ins for Triton's interpreter module (conv-core's tests run without Triton;
conv-rdna's test_launch_paths.py checks the real one gives the same bits with and without it)."""

from __future__ import annotations

import dataclasses
import math
import types

from conv_core import interpreter


@dataclasses.dataclass(frozen=True)
class Options:
    debug: bool = False
    sanitize_overflow: bool = True


def fake_interpreter(debug: bool = False):
    """A module shaped like ``triton.runtime.interpreter``: options, a language patch that counts what it
    patches (and undoes), and a grid executor that patches once and calls the kernel's nested functions."""
    tl = types.ModuleType("tl")
    tl.core = types.ModuleType("tl.core")
    module = types.SimpleNamespace(tl=tl, patched=[], undone=[])

    class Scope:
        def __init__(self, names=()):
            self.names = list(names)

        def restore(self):
            module.undone.extend(self.names)

    def patch_lang(fn):
        names = sorted(v.__name__ for v in fn.__globals__.values() if v is tl or v is tl.core)
        module.patched.extend(names)
        return Scope(names)

    class GridExecutor:
        def __init__(self, fn, nested):
            self.fn, self.nested = fn, nested

        def __call__(self):
            scope = module._patch_lang(self.fn)
            try:
                for fn in self.nested:
                    module._patch_lang(fn)
            finally:
                scope.restore()

    module.interpreter_builder = types.SimpleNamespace(options=Options(debug=debug))
    module._patch_lang, module._LangPatchScope, module.GridExecutor = patch_lang, Scope, GridExecutor
    return module


def function_seeing(**names):
    """A function whose globals hold ``names`` (as a kernel's module would hold ``tl``)."""
    return types.FunctionType(compile("def f(): pass", "<f>", "exec").co_consts[0], dict(names))


def test_overflow_checks_go_unless_debug():
    lean = fake_interpreter()
    interpreter._without_overflow_checks(lean)
    assert lean.interpreter_builder.options == Options(sanitize_overflow=False)
    debugging = fake_interpreter(debug=True)
    interpreter._without_overflow_checks(debugging)
    assert debugging.interpreter_builder.options.sanitize_overflow


def test_options_of_another_shape_are_left_alone():
    other = types.SimpleNamespace(interpreter_builder=types.SimpleNamespace(options=object()))
    options = other.interpreter_builder.options
    interpreter._without_overflow_checks(other)
    assert other.interpreter_builder.options is options


def test_a_launch_patches_each_language_module_once():
    fake = fake_interpreter()
    interpreter._language_patched_once_per_launch(fake)
    tl = fake.tl
    kernel = function_seeing(tl=tl)
    helper, standard = function_seeing(tl=tl), function_seeing(core=tl.core)
    fake.GridExecutor(kernel, [helper, standard, helper, standard])()
    # the kernel's tl, then tl.core the first time a function sees it; the launch's own patch is undone
    assert fake.patched == ["tl", "tl.core"]
    assert fake.undone == ["tl"]
    fake.GridExecutor(kernel, [standard])()  # a new launch starts over
    assert fake.patched == ["tl", "tl.core", "tl", "tl.core"]


def test_outside_a_launch_triton_patches_as_it_would():
    fake = fake_interpreter()
    interpreter._language_patched_once_per_launch(fake)
    helper = function_seeing(tl=fake.tl)
    fake._patch_lang(helper)
    fake._patch_lang(helper)
    assert fake.patched == ["tl", "tl"]


def test_it_wraps_once():
    fake = fake_interpreter()
    interpreter._language_patched_once_per_launch(fake)
    wrapped = fake._patch_lang, fake.GridExecutor.__call__
    interpreter._language_patched_once_per_launch(fake)
    assert (fake._patch_lang, fake.GridExecutor.__call__) == wrapped


class BlockType:
    """A block of ``element_ty`` (as ``tl.block_type``: unhashable, since it compares by value)."""

    __hash__ = None

    def __init__(self, element_ty):
        self.element_ty = element_ty


def fake_dtypes():
    """A module with Triton's ``_get_np_dtype`` shape: a block answers for its element type; calls are counted."""
    tl = types.SimpleNamespace(block_type=BlockType)
    module = types.SimpleNamespace(tl=tl, asked=[])

    def get_np_dtype(tt_dtype):
        module.asked.append(tt_dtype)
        element = tt_dtype.element_ty if isinstance(tt_dtype, BlockType) else tt_dtype
        return {"fp16": "float16", "bf16": "uint16"}.get(element, "uint64") if isinstance(element, str) else "uint64"

    module._get_np_dtype = get_np_dtype
    return module


def test_numpy_dtypes_are_answered_once_per_triton_dtype():
    fake = fake_dtypes()
    shipped = fake._get_np_dtype
    asked = ["fp16", BlockType("fp16"), "bf16", BlockType("bf16"), "fp16", BlockType("ptr")]
    expected = [shipped(t) for t in asked]
    fake.asked.clear()
    interpreter._numpy_dtypes_kept(fake)
    assert [fake._get_np_dtype(t) for t in asked] == expected
    assert fake.asked == ["fp16", "bf16", "ptr"]  # a block is answered as its element type, each once


def test_an_unhashable_dtype_is_answered_by_triton_every_time():
    fake = fake_dtypes()
    interpreter._numpy_dtypes_kept(fake)
    odd = BlockType(BlockType("fp16"))  # a block of blocks: its element type is no dictionary key
    assert fake._get_np_dtype(odd) == "uint64" and fake._get_np_dtype(odd) == "uint64"
    assert fake.asked == [odd, odd]


def test_numpy_dtypes_are_wrapped_once():
    fake = fake_dtypes()
    interpreter._numpy_dtypes_kept(fake)
    wrapped = fake._get_np_dtype
    interpreter._numpy_dtypes_kept(fake)
    assert fake._get_np_dtype is wrapped


def test_a_helper_module_gaining_names_is_looked_at_again():
    fake = fake_interpreter()
    interpreter._language_patched_once_per_launch(fake)
    helper = function_seeing()
    kernel = function_seeing(tl=fake.tl)
    fake.GridExecutor(kernel, [helper])()
    helper.__globals__["core"] = fake.tl.core  # the same globals, one name more
    fake.GridExecutor(kernel, [helper])()
    assert fake.patched == ["tl", "tl", "tl.core"]


def fake_core(extra_field: bool = False):
    """``triton.language.core``'s tensor, block type and constexpr, shaped as Triton 3.6's; a count of the shapes
    the tensor's ``__init__`` built."""
    core = types.SimpleNamespace(float32="fp32", built=[])

    class Constexpr:
        def __init__(self, value):
            self.value = value

    class BlockType:
        def __init__(self, scalar, shape):
            self.scalar, self.shape = scalar, list(shape)

        def is_block(self):
            return True

    class Tensor:
        def __init__(self, handle, type_):
            self.handle, self.type, self.dtype = handle, type_, type_.scalar
            self.shape = tuple(Constexpr(s) for s in type_.shape)
            self.numel = Constexpr(math.prod(type_.shape))
            core.built.append(tuple(type_.shape))
            if extra_field:
                self.name = "x"

    core.tensor, core.block_type, core.constexpr = Tensor, BlockType, Constexpr
    return core


def test_tensors_of_one_shape_share_their_shape_and_numel():
    core = fake_core()
    interpreter._tensor_shapes_kept(core)
    core.built.clear()
    a, b = core.tensor("h1", core.block_type("fp16", [4, 8])), core.tensor("h2", core.block_type("fp32", [4, 8]))
    c = core.tensor("h3", core.block_type("fp16", [2, 8]))
    assert (a.handle, a.dtype, b.handle, b.dtype) == ("h1", "fp16", "h2", "fp32")
    assert a.shape is b.shape and a.numel is b.numel and [s.value for s in a.shape] == [4, 8] and a.numel.value == 32
    assert [s.value for s in c.shape] == [2, 8] and c.numel.value == 16
    assert core.built == [(4, 8), (2, 8)]  # each shape built once


def test_a_tensor_with_other_fields_is_left_as_triton_makes_it():
    core = fake_core(extra_field=True)
    shipped = core.tensor.__init__
    interpreter._tensor_shapes_kept(core)
    assert core.tensor.__init__ is shipped


def test_tensor_shapes_are_kept_by_one_wrapping():
    core = fake_core()
    interpreter._tensor_shapes_kept(core)
    wrapped = core.tensor.__init__
    interpreter._tensor_shapes_kept(core)
    assert core.tensor.__init__ is wrapped
