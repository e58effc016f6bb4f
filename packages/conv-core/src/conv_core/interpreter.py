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

:func:`lean_interpreter` turns both off for the process, once, where the interpreter is built as in Triton
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

    def modules(fn) -> frozenset[int]:
        return frozenset(id(value) for value in fn.__globals__.values() if any(value is m for m in languages))

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
