"""The engine's call caches, one per question, and the layering of the modules that fill them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conv_core
from conv_core.frontend import call_cache, ops
from conv_core.frontend.call_cache import EAGER_KEY_FIELDS, BackwardKey, OpKey, TracedKey
from conv_core.frontend.dispatch import op_args
from conv_core.testing.fakes import isolate, use_backends
from conv_core.testing.imports import import_graph

SOURCE = Path(conv_core.__file__).resolve().parent


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


#: conv-core's modules and what each imports, at module level or inside functions.
GRAPH = import_graph(SOURCE)


def test_functional_and_ops_do_not_import_each_other():
    functional, ops = GRAPH.edges["conv_core.functional"], GRAPH.edges["conv_core.frontend.ops"]
    assert "conv_core.frontend.ops" not in functional and "conv_core.functional" not in ops
    assert "conv_core.frontend.dispatch" in functional & ops  # the layer they share


def operands(grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 7, 6, generator=g).requires_grad_(grad)
    w = torch.randn(6, 4, 3, 3, generator=g).requires_grad_(grad)
    return x, w


def test_each_question_has_its_own_cache_and_reset_clears_them_all(monkeypatch):
    use_backends(monkeypatch)  # aten alone: every decision below is aten's
    calls = call_cache.calls()
    x, w = operands(grad=True)
    conv_core.conv2d(x, w, None, padding=1)
    (key,) = calls.eager
    assert len(key) == len(EAGER_KEY_FIELDS) and dict(zip(EAGER_KEY_FIELDS, key))["needs_grad"] is True
    x, w = operands()
    geometry = ([1, 1], [1, 1, 1, 1], [1, 1], 1)
    torch.ops.conv_core.convolution(x, w, None, *geometry, "", None, "")
    y = torch.ops.conv_core.convolution(x, w, None, *geometry, "", None, "")
    torch.ops.conv_core.convolution_backward_weight(x, y, list(w.shape), *geometry, "")
    assert ops._plugin_wins(op_args(*geometry, "", None, ""), x, w, None) is False
    assert [type(k) for k in calls.op_routes] == [OpKey]
    assert [(type(k), k.direction) for k in calls.backward] == [(BackwardKey, "bwd_weight")]
    assert [type(k) for k in calls.traced] == [TracedKey] and list(calls.traced.values()) == [False]
    assert len(list(calls.routes())) == 2  # the eager route and the opaque op's
    conv_core.get_engine().reset()
    assert not (calls.eager or calls.op_routes or calls.backward or calls.traced)


def test_a_new_engine_gets_new_caches_and_the_engine_holds_none(monkeypatch):
    """The caches are the front end's: a new process-wide engine (conv_core.reset, a test's isolate) starts them
    afresh, and the engine module imports nothing of the front end."""
    use_backends(monkeypatch)
    x, w = operands()
    conv_core.conv2d(x, w, None, padding=1)
    before = call_cache.calls()
    assert len(before.eager) == 1
    use_backends(monkeypatch)
    assert call_cache.calls() is not before and not call_cache.calls().eager
    assert not hasattr(conv_core.get_engine(), "calls")
    assert not {m for m in GRAPH.edges["conv_core.engine"] if m.startswith("conv_core.frontend")}


def test_the_first_call_of_a_process_keeps_its_route(tmp_path):
    """The process's first call makes the engine; its route must land in that engine's caches, not in the ones
    from before any engine (which the next call would replace, deciding the route again)."""
    code = ("import torch, conv_core\n"
            "from conv_core.frontend import call_cache\n"
            "x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)\n"
            "conv_core.conv2d(x, w)\n"
            "print(len(call_cache.calls().eager))\n")
    env = {**os.environ, "CONV_CORE_TUNING_DB": str(tmp_path / "tuning.json"), "CONV_CORE_FIRST_USE_DIR": "off",
           "CONV_CORE_PLUGINS": "aten"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split()[-1] == "1"
