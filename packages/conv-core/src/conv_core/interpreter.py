"""Triton's CPU interpreter (``TRITON_INTERPRET=1``), and the dead work conv-core takes out of it.

CI checks every kernel's numerics under the interpreter, and ``conv-core check`` and ``./run.sh`` run kernels
through it on a machine without a GPU. Two things the interpreter does on every launch change no result and
were most of its time on conv-rdna's kernels (a weight-gradient case: 56 s as Triton ships it, 16 s without):

- it checks every 32-bit integer ``+``, ``-`` and ``*`` for overflow, in 64 bits on numpy, and hands the
  result to ``device_assert``, which drops it outside debug mode (a compiled kernel computes no such check
  outside debug mode either);
- every call of a ``@triton.jit`` function from a kernel patches ``triton.language`` again with the same
  interpreted builtins the launch already installed (a millisecond a call: ``inspect.getmembers`` over the
  language's modules).

Two more it recomputes for every value an operation makes, kept here instead: a Triton dtype's numpy dtype
(5% of conv-rdna's conformance run) and a tensor's ``shape`` and ``numel`` (a ``tl.tuple``: a quarter of it).

:func:`lean_interpreter` takes all four out for the process, once, where the interpreter is built as in Triton
3.6 to 3.9; on any other it changes nothing. ``CONV_CORE_LEAN_INTERPRETER=0`` leaves the interpreter as Triton
ships it (to rule this module out). Nothing here imports Triton until an interpreted launch asks.
"""

from __future__ import annotations

import dataclasses
import functools
import os


def interpreting() -> bool:
    """Whether Triton kernels run under the CPU interpreter in this process (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def lean_interpreter() -> None:
    """Take the interpreter's dead work out (see the module's docstring); called before each interpreted launch."""
    if os.environ.get("CONV_CORE_LEAN_INTERPRETER") == "0":
        return
    from triton.runtime import interpreter

    _without_overflow_checks(interpreter)
    _language_patched_once_per_launch(interpreter)
    _numpy_dtypes_kept(interpreter)
    _tensor_shapes_kept(getattr(getattr(interpreter, "tl", None), "core", None))


def _without_overflow_checks(interpreter) -> None:
    """The interpreter's overflow checks off, unless its options ask for debug (the checks are asserted then)."""
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or getattr(options, "debug", True) or not hasattr(options, "sanitize_overflow"):
        return
    builder.options = dataclasses.replace(options, sanitize_overflow=False)


def _language_patched_once_per_launch(interpreter) -> None:
    """Within a launch, ``triton.language``'s modules are patched once each: a ``@triton.jit`` function called
    from the kernel whose modules (``tl``, ``tl.core``) the launch has patched already skips patching them again
    (Triton never undoes a nested patch before the launch's end, so skipping one loses nothing). Outside a
    launch Triton's own patching runs as it would."""
    patch, scope_type = getattr(interpreter, "_patch_lang", None), getattr(interpreter, "_LangPatchScope", None)
    executor, tl = getattr(interpreter, "GridExecutor", None), getattr(interpreter, "tl", None)
    if patch is None or scope_type is None or executor is None or tl is None or getattr(patch, "lean", False):
        return
    languages = (tl, tl.core)
    launch = {"running": False, "patched": frozenset()}  # the modules patched since the running launch began
    #: id and size of a function's globals -> (those globals, so that the id stays theirs; the language modules)
    found: dict[tuple[int, int], tuple[dict, frozenset[int]]] = {}

    def modules(fn) -> frozenset[int]:
        names = fn.__globals__
        key = (id(names), len(names))
        kept = found.get(key)
        if kept is None:
            kept = found[key] = (names, frozenset(id(value) for value in names.values()
                                                  if any(value is m for m in languages)))
        return kept[1]

    def patch_once(fn):
        seen = modules(fn)
        if launch["running"] and launch["patched"] and seen <= launch["patched"]:
            return scope_type()  # nothing to undo: the launch's patches stay in place until it ends
        scope = patch(fn)
        if launch["running"]:
            launch["patched"] |= seen
        return scope

    run = executor.__call__

    def run_launch(self, *args, **kwargs):
        launch["running"], launch["patched"] = True, frozenset()
        try:
            return run(self, *args, **kwargs)
        finally:
            launch["running"], launch["patched"] = False, frozenset()

    patch_once.lean = True
    interpreter._patch_lang = patch_once
    executor.__call__ = run_launch


def _numpy_dtypes_kept(interpreter) -> None:
    """``_get_np_dtype`` answered once per Triton dtype (a block's: its element type's), as Triton's answer depends
    on nothing else; a dtype that cannot be a dictionary key is answered by Triton's own, every time."""
    original = getattr(interpreter, "_get_np_dtype", None)
    block_type = getattr(getattr(interpreter, "tl", None), "block_type", None)
    if original is None or block_type is None or getattr(original, "lean", False):
        return
    kept: dict = {}

    def numpy_dtype(tt_dtype):
        key = tt_dtype.element_ty if isinstance(tt_dtype, block_type) else tt_dtype
        try:
            found = kept.get(key)
        except TypeError:  # unhashable
            return original(tt_dtype)
        if found is None:
            found = kept[key] = original(key)
        return found

    numpy_dtype.lean = True
    interpreter._get_np_dtype = numpy_dtype


#: What Triton's ``tensor.__init__`` sets (3.6 to 3.9); one that sets anything else is left as it is.
TENSOR_FIELDS = frozenset({"handle", "shape", "numel", "type", "dtype"})


def _tensor_shapes_kept(core) -> None:
    """``tl.tensor``'s ``shape`` and ``numel`` made once per shape and shared (both are only read), where Triton's
    ``__init__`` sets exactly :data:`TENSOR_FIELDS`, its shape read off the type."""
    tensor, block_type = getattr(core, "tensor", None), getattr(core, "block_type", None)
    if tensor is None or block_type is None or getattr(tensor.__init__, "lean", False):
        return
    shipped, kept = tensor.__init__, {}

    def made(handle, type_):
        value = object.__new__(tensor)
        shipped(value, handle, type_)
        return value

    sample = made(None, block_type(core.float32, [2, 4]))
    if set(vars(sample)) != TENSOR_FIELDS or [s.value for s in sample.shape] != [2, 4] or sample.numel.value != 8:
        return

    def lean_init(self, handle, type_):
        shape = tuple(type_.shape) if type_.is_block() else ()
        found = kept.get(shape)
        if found is None:
            value = made(handle, type_)
            found = kept[shape] = (value.shape, value.numel)
        self.handle, self.type, self.dtype = handle, type_, type_.scalar
        self.shape, self.numel = found

    lean_init.lean = True
    tensor.__init__ = lean_init
