"""The CONV_CORE_* environment variables, as documented in docs/design.md, on real installed backends.

Each test sets the variables, then calls ``conv_core.reset()`` so that the
next engine reads them (settings are read once per engine).
"""

from __future__ import annotations

import logging

import pytest
import torch
from conv_broken_run.hooks import KERNEL_ID as CRASH_KERNEL
from conv_broken_run.hooks import TRIGGER_OUT_CHANNELS
from integration_support import ATEN_KERNEL, CPU, ENTRY_POINTS, EXAMPLE_KERNEL, small_problem

import conv_core
from conv_core.frontend.call import problem_of_tensors
from conv_core.reference import compare, random_operands
from conv_core.tuning import Entry, write_entries


def with_env(monkeypatch, **variables) -> conv_core.engine.Engine:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    conv_core.reset()
    return conv_core.get_engine()


def names(engine) -> list[str]:
    return [b.name for b in engine.registry.backends()]


def conv_is_right(problem=None) -> torch.Tensor:
    problem = problem or small_problem()
    x, w, bias = random_operands(problem, CPU, seed=5)
    with torch.no_grad():
        y = conv_core.conv2d(x, w, bias, stride=problem.stride, padding=problem.padding, groups=problem.groups)
    assert compare(problem, y, (x, w, bias)).ok
    return y


# ---- which plugins load ------------------------------------------------------------------------------


def test_disable_plugins_skips_them(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_DISABLE_PLUGINS="example, broken_import")
    assert names(engine) == ["aten", "broken_candidate", "broken_hook", "broken_run", "misspelled_hook"]
    assert engine.ranking(small_problem(), CPU).best.kernel_id == ATEN_KERNEL
    conv_is_right()


def test_disabling_every_plugin_leaves_aten(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_DISABLE_PLUGINS=",".join([*ENTRY_POINTS, "aten"]))
    assert names(engine) == ["aten"]  # aten is built in: it cannot be disabled
    assert engine.ranking(small_problem(), CPU).declined == []  # nobody left to decline or fail
    conv_is_right()


def test_plugins_allow_list_loads_only_those(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_PLUGINS="example")
    assert names(engine) == ["aten", "example"]
    assert engine.ranking(small_problem(), CPU).best.kernel_id == EXAMPLE_KERNEL
    # the allow list filters entry-point names; a name that matches nothing leaves aten alone
    assert names(with_env(monkeypatch, CONV_CORE_PLUGINS="no_such_backend")) == ["aten"]


def test_block_list_wins_over_allow_list(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_PLUGINS="example,broken_run", CONV_CORE_DISABLE_PLUGINS="example")
    assert names(engine) == ["aten", "broken_run"]


# ---- forcing a backend --------------------------------------------------------------------------------


def test_force_backend_aten_beats_the_better_estimate(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_BACKEND="aten")
    ranking = engine.ranking(small_problem(), CPU)
    assert [r.kernel_id for r in ranking.ranked] == [ATEN_KERNEL]
    conv_is_right()


def test_force_backend_example(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_BACKEND="example")
    assert [r.kernel_id for r in engine.ranking(small_problem(), CPU).ranked] == [EXAMPLE_KERNEL]
    conv_is_right()


def test_force_backend_that_declines_raises_with_the_reason(monkeypatch):
    with_env(monkeypatch, CONV_CORE_BACKEND="example")
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 2, 3, 3)
    with pytest.raises(conv_core.NoCandidateError, match="example: groups=2: only groups=1 is implemented"):
        conv_core.conv2d(x, w, padding=1, groups=2)


def test_forcing_a_forward_only_backend_leaves_gradients_to_the_others(monkeypatch, caplog):
    """The forward runs on the forced backend; the gradients it has no kernel for run on the best other
    backend, and the forward call says so (a warning), not ``.backward()`` (an error)."""
    engine = with_env(monkeypatch, CONV_CORE_BACKEND="example")
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    w = torch.randn(6, 4, 3, 3)
    with caplog.at_level(logging.WARNING, logger="conv_core"):
        y = conv_core.conv2d(x, w, padding=1)
    assert "backend 'example' has no bwd_data candidate" in caplog.text
    y.sum().backward()
    (expected,) = torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1).sum(), x)
    torch.testing.assert_close(x.grad, expected)
    forward = problem_of_tensors(x, w, padding=1)
    assert engine.ranking(forward, CPU).best.kernel_id == EXAMPLE_KERNEL


def test_force_unknown_backend_raises(monkeypatch):
    with_env(monkeypatch, CONV_CORE_BACKEND="nope")
    with pytest.raises(ValueError, match="CONV_CORE_BACKEND='nope' cannot be used: no backend has that name; "
                                         "loaded backends: aten, "):
        conv_is_right()


def test_by_default_an_estimate_never_displaces_aten(monkeypatch):
    """Without CONV_CORE_TRUST_ESTIMATES (which the other tests set), the example's estimate is no evidence."""
    monkeypatch.delenv("CONV_CORE_TRUST_ESTIMATES")
    engine = with_env(monkeypatch)
    ids = [r.kernel_id for r in engine.ranking(small_problem(), CPU).ranked]
    assert ids[:2] == [ATEN_KERNEL, EXAMPLE_KERNEL]


# ---- tuning data, benchmark, trace ----------------------------------------------------------------------


def test_tuning_db_times_outrank_estimates_for_the_same_version(monkeypatch, tmp_path):
    problem = small_problem()
    db = tmp_path / "mine.json"
    engine = with_env(monkeypatch, CONV_CORE_TUNING_DB=str(db))
    versions = engine.versions()
    write_entries(db, [
        Entry("cpu", "cpu", problem.key, ATEN_KERNEL, versions["aten"], 0.5),
        Entry("cpu", "cpu", problem.key, EXAMPLE_KERNEL, "0.0.1-stale", 0.1),  # another version: ignored
    ])
    engine.reset()  # measured times are read once per engine
    ranking = engine.ranking(problem, CPU)
    assert [(r.kernel_id, r.source) for r in ranking.ranked[:2]] == [(ATEN_KERNEL, "tuning-db"),
                                                                      (EXAMPLE_KERNEL, "estimate")]


def test_tuning_db_broken_entry_excludes_the_candidate(monkeypatch, tmp_path):
    problem = small_problem()
    db = tmp_path / "mine.json"
    write_entries(db, [Entry("cpu", "cpu", problem.key, EXAMPLE_KERNEL, "0.1.0", 1.0, "broken")])
    engine = with_env(monkeypatch, CONV_CORE_TUNING_DB=str(db))
    ranking = engine.ranking(problem, CPU)
    assert ranking.best.kernel_id == ATEN_KERNEL
    assert dict(ranking.excluded)[EXAMPLE_KERNEL] == "measured as broken (tuning-db)"


def test_first_use_benchmark_times_candidates(monkeypatch):
    engine = with_env(monkeypatch, CONV_CORE_BENCHMARK="1")
    problem = small_problem(out_channels=TRIGGER_OUT_CHANNELS)
    ranking = engine.ranking(problem, CPU)
    sources = {r.kernel_id: r.source for r in ranking.ranked}
    assert sources[EXAMPLE_KERNEL] == sources[ATEN_KERNEL] == "benchmark"
    assert CRASH_KERNEL not in sources  # it raised while being timed: never ranked
    assert "failed when benchmarked" in dict(ranking.excluded)[CRASH_KERNEL]
    conv_is_right(problem)


def test_trace_logs_each_decision(monkeypatch, caplog):
    with_env(monkeypatch, CONV_CORE_TRACE="1")
    caplog.set_level(logging.INFO, logger="conv_core")
    conv_is_right()
    decisions = [r.getMessage() for r in caplog.records if " -> " in r.getMessage()]
    assert len(decisions) == 1
    assert decisions[0].startswith(f"conv_core: {small_problem().key} -> {EXAMPLE_KERNEL} (")
    assert decisions[0].endswith(" us, estimate)")
