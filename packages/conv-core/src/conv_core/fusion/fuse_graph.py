"""Fusion where only the data flow can prove it: a module's forward traced by ``torch.fx`` and rewritten.

An attribute-style block (ResNet's Bottleneck: ``self.relu(self.bn1(self.conv1(x)))``,
with the same ``relu`` called again on other tensors) holds its convolution,
batch norm and activation as attributes; only its forward says which output
goes where. Tracing it gives that data flow as a graph: a convolution whose
output has exactly one user, a batch norm, whose output has exactly one user,
an activation, is a chain whose intermediate values nobody else sees, so the
three calls can become one. Each call site is a separate node, so a shared
activation module is fused at the call sites that follow a chain and keeps
working at the others.

The rewritten graph becomes Python code run with the traced module as ``self``
(submodules are looked up on it at call time, as its own forward does). The
trace is taken in eval mode and is used only while the module and every module
traced through are in eval mode; tracing never leaves anything on the module.
"""

from __future__ import annotations

import contextlib
import itertools
import linecache
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

from . import fold, fused_call

#: Activation functions and tensor methods the graph may call after a chain -> conv-core activation name.
_FUNCTIONS = {F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", F.silu: "silu"}
_METHODS = {"relu": "relu"}
#: What adds a residual: ``out + identity``, ``out += identity`` (an in-place add of a value nobody else sees).
_ADDS = (operator.add, operator.iadd, torch.add)
_FILENAMES = itertools.count()


class _Tracer(fx.Tracer):
    """A tracer that calls fusion's parts (and whatever must stay whole) as leaves, and records what it inlined."""

    def __init__(self, keep_whole: Callable[[nn.Module], bool]) -> None:
        super().__init__()
        self.keep_whole = keep_whole
        self.inlined: dict[nn.Module, None] = {}
        self.whole: dict[nn.Module, None] = {}

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if fold.is_part(m):
            return True
        if fold.has_hooks(m) or self.keep_whole(m):  # inlining would skip its hooks / its own forward
            self.whole[m] = None
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m, forward, args, kwargs):
        if not self.is_leaf_module(m, self.path_of_module(m)):
            self.inlined[m] = None
        return super().call_module(m, forward, args, kwargs)


@dataclass(frozen=True)
class Traced:
    """A module's forward as a graph, with the modules traced through and those left whole."""

    graph: fx.Graph
    inlined: tuple[nn.Module, ...]
    whole: tuple[nn.Module, ...]


@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """Put ``module``'s tree in eval mode, then restore every module's own flag."""
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


def trace(module: nn.Module, keep_whole: Callable[[nn.Module], bool]) -> Traced | None:
    """``module``'s eval-mode forward as a graph, or None when it does not trace (or would need new attributes)."""
    tracer = _Tracer(keep_whole)
    before = set(module.__dict__)
    try:
        with _eval_mode(module):
            graph = tracer.trace(module)
    except Exception:  # fx fails in many ways (control flow on values, unsupported calls): all mean "no graph"
        return None
    finally:
        # the tracer stores tensor constants as attributes of the traced module; never leave them there
        added = set(module.__dict__) - before
        for name in added:
            delattr(module, name)
    if added:
        return None
    return Traced(graph, tuple(tracer.inlined), tuple(tracer.whole))


def _only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _takes_only(node: fx.Node, value: fx.Node, allowed_kwargs: frozenset = frozenset()) -> bool:
    """Whether ``node``'s sole input is ``value``, passed once as its first argument."""
    return node.args == (value,) and set(node.kwargs) <= allowed_kwargs and value not in node.kwargs.values()


def _activation(node: fx.Node, value: fx.Node, root: nn.Module) -> str | None:
    """The conv-core activation ``node`` applies to ``value`` alone, or None."""
    if node.op == "call_module" and _takes_only(node, value):
        return fold.activation_of(root.get_submodule(node.target))
    if node.op == "call_method" and _takes_only(node, value):
        return _METHODS.get(node.target)
    if node.op != "call_function":
        return None
    if node.target is F.gelu and _takes_only(node, value, frozenset({"approximate"})):
        return fold.GELU_APPROXIMATIONS.get(node.kwargs.get("approximate", "none"))
    if _takes_only(node, value, frozenset({"inplace"})):
        return _FUNCTIONS.get(node.target)
    return None


def _residual(node: fx.Node, value: fx.Node) -> fx.Node | None:
    """What ``node`` adds to ``value`` (``value + other``, either way round), or None."""
    if node.op != "call_function" or node.target not in _ADDS or node.kwargs or len(node.args) != 2:
        return None
    a, b = node.args
    other = b if a is value else a if b is value else None
    return other if isinstance(other, fx.Node) and other is not value else None


def _chain(node: fx.Node, root: nn.Module) -> tuple[list[fx.Node], str | None, str | None, fx.Node | None]:
    """The nodes of the chain starting at convolution ``node``, its batch norm's target, its activation, and the
    residual added before a ReLU (a residual block's end: ``relu(bn(conv(x)) + identity)``), if any."""
    chain, norm_target, activation = [node], None, None
    conv = root.get_submodule(node.target)
    after = _only_user(node)
    if after is not None and after.op == "call_module" and _takes_only(after, node) \
            and fold.folds_into(root.get_submodule(after.target), conv):
        norm_target = after.target
        chain.append(after)
        after = _only_user(after)
    residual = None if after is None else _residual(after, chain[-1])
    relu = None if residual is None else _only_user(after)
    if relu is not None and _activation(relu, after, root) == "relu":
        return [*chain, after, relu], norm_target, "relu", residual
    if after is not None:
        activation = _activation(after, chain[-1], root)
        if activation is not None:
            chain.append(after)
    return chain, norm_target, activation, None


def _is_fusable_conv_call(node: fx.Node, root: nn.Module) -> bool:
    return (node.op == "call_module" and len(node.args) == 1 and not node.kwargs
            and fold.fusable_conv(root.get_submodule(node.target)))


def rewrite(graph: fx.Graph, root: nn.Module) -> int:
    """Replace every fusable chain in ``graph`` by one ``fused_call.conv_bn_act`` call (given the residual, where a ReLU
    follows an add); the number replaced."""
    fused, erased = 0, set()
    for node in list(graph.nodes):
        if node in erased or not _is_fusable_conv_call(node, root):
            continue
        chain, norm_target, activation, residual = _chain(node, root)
        if len(chain) == 1:
            continue
        last = chain[-1]
        with graph.inserting_before(last):
            conv_ref = graph.get_attr(node.target)
            norm_ref = None if norm_target is None else graph.get_attr(norm_target)
            call = graph.call_function(fused_call.conv_bn_act, (node.args[0], conv_ref, norm_ref, activation)
                                       + (() if residual is None else (residual,)))
        last.replace_all_uses_with(call)
        for done in reversed(chain):
            graph.erase_node(done)
            erased.add(done)
        fused += 1
    return fused


def compile_forward(graph: fx.Graph) -> Callable:
    """The graph as a Python function ``forward(self, ...)``; source kept in ``linecache`` for tracebacks."""
    code = graph.python_code(root_module="self")
    filename = f"<conv_core fused forward {next(_FILENAMES)}>"
    linecache.cache[filename] = (len(code.src), None, code.src.splitlines(True), filename)
    namespace = dict(code.globals)
    exec(compile(code.src, filename, "exec"), namespace)  # fx's own code generation, as GraphModule runs it
    return namespace["forward"]


@dataclass(frozen=True)
class GraphFusion:
    """A module's fused forward (from its rewritten graph) and when it may run instead of the module's own."""

    forward: Callable
    inlined: tuple[nn.Module, ...]

    def applies(self, module: nn.Module) -> bool:
        """Only in eval mode of the module and of everything traced through: the trace took eval-mode branches."""
        return not module.training and not any(m.training for m in self.inlined)

    def run(self, module: nn.Module, *args, **kwargs):
        return self.forward(module, *args, **kwargs)


def fuse(module: nn.Module, keep_whole: Callable[[nn.Module], bool]) -> tuple[GraphFusion | None, tuple] | None:
    """Trace and rewrite ``module``.

    Returns None if it does not trace, else its fusion (None if nothing was
    fused) and the modules the trace left whole (to be fused on their own).
    """
    traced = trace(module, keep_whole)
    if traced is None:
        return None
    if rewrite(traced.graph, module) == 0:
        return None, traced.whole
    traced.graph.lint()
    return GraphFusion(compile_forward(traced.graph), traced.inlined), traced.whole

