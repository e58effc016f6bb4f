"""Broken backend packages are reported with their errors and never cost a user a result."""

from __future__ import annotations

import json

import pytest
import torch
from conv_broken_hook.hooks import MESSAGE as HOOK_MESSAGE
from conv_broken_run.hooks import KERNEL_ID as CRASH_KERNEL
from conv_broken_run.hooks import MESSAGE as RUN_MESSAGE
from conv_broken_run.hooks import TRIGGER_OUT_CHANNELS
from integration_support import ATEN_KERNEL, CPU, EXAMPLE_KERNEL, backend, call_args, small_problem, torch_conv

import conv_core
from conv_core import cli
from conv_core.reference import compare, random_operands

# ---- each broken package, reported ---------------------------------------------------------------------


def test_import_error_is_the_load_error():
    broken = backend("broken_import")
    assert not broken.ok and broken.info is None and broken.plugin is None
    assert broken.load_error.startswith("ImportError: conv-broken-import needs the native library 'libconvbroken'")
    assert "conv_broken_import/hooks.py" in broken.load_error  # says where, for the plugin's author
    assert broken not in conv_core.get_engine().registry.active()


def test_raising_candidates_hook_is_recorded_and_declined():
    problem = small_problem()
    ranking = conv_core.get_engine().ranking(problem, CPU)
    reasons = {d.backend: d.reason for d in ranking.declined}
    assert reasons["broken_hook"].startswith(f"failed: RuntimeError: {HOOK_MESSAGE} (at ")
    failures = backend("broken_hook").failures
    assert any(f.startswith(f"conv_core_candidates({problem.key}): RuntimeError: {HOOK_MESSAGE}") for f in failures)
    assert ranking.best.kernel_id == EXAMPLE_KERNEL


def test_raising_tuning_tables_hook_is_recorded_and_other_tables_still_count():
    from integration_support import TABLE_PROBLEM_KEY

    ranking = conv_core.get_engine().ranking(conv_core.ConvProblem.from_key(TABLE_PROBLEM_KEY), CPU)
    assert ranking.best.source == "table:example"  # the example's table is read despite broken_hook's
    assert any(f.startswith("conv_core_tuning_tables(): OSError") for f in backend("broken_hook").failures)


MALFORMED = {
    1: "TypeError: backend 'broken_candidate' returned str, not a Candidate or Declined",
    2: "TypeError: backend 'broken_candidate' returned a candidate labelled 'aten'",
    3: "TypeError: candidate broken_candidate:negative:time has estimate_us=-1.0; it must be finite and > 0",
}


@pytest.mark.parametrize("batch", sorted(MALFORMED), ids=["string", "wrong-backend-name", "negative-estimate"])
def test_malformed_candidates_are_recorded_and_never_ranked(batch):
    problem = small_problem(batch=batch)
    ranking = conv_core.get_engine().ranking(problem, CPU)
    ids = [r.kernel_id for r in ranking.ranked]
    assert ids[0] == EXAMPLE_KERNEL
    assert ids.count(ATEN_KERNEL) == 1 and "aten:native:fake" not in ids  # no impersonation of aten
    assert not any(i.startswith("broken_candidate:") for i in ids)
    reasons = {d.backend: d.reason for d in ranking.declined}
    assert reasons["broken_candidate"].startswith(f"failed: {MALFORMED[batch]}")
    assert any(MALFORMED[batch] in f for f in backend("broken_candidate").failures)
    x, w, bias = random_operands(problem, CPU)
    with torch.no_grad():
        y = conv_core.conv2d(x, w, bias, **call_args(problem))
    assert not torch.isnan(y).any()
    assert compare(problem, y, (x, w, bias)).ok


def crash_problem(**changes):
    return small_problem(out_channels=TRIGGER_OUT_CHANNELS, **changes)


def test_candidate_that_raises_when_run_falls_back_to_the_next():
    problem = crash_problem()
    ranking = conv_core.get_engine().ranking(problem, CPU)
    assert [r.kernel_id for r in ranking.ranked][:2] == [CRASH_KERNEL, EXAMPLE_KERNEL]
    x, w, bias = random_operands(problem, CPU, seed=3)
    with torch.no_grad():
        y = conv_core.conv2d(x, w, bias, **call_args(problem))
    assert compare(problem, y, (x, w, bias)).ok
    # the failure is recorded on the backend and the candidate left the cached ranking
    failures = backend("broken_run").failures
    assert len(failures) == 1
    assert failures[0].startswith(f"run of {CRASH_KERNEL} on {problem.key}: RuntimeError: {RUN_MESSAGE}")
    assert dict(ranking.excluded)[CRASH_KERNEL] == f"failed when run: RuntimeError: {RUN_MESSAGE}"
    assert ranking.best.kernel_id == EXAMPLE_KERNEL
    # later calls go straight to the next candidate: no new failure
    with torch.no_grad():
        again = conv_core.conv2d(x, w, bias, **call_args(problem))
    torch.testing.assert_close(again, y)
    assert len(backend("broken_run").failures) == 1


def test_explain_shows_the_run_failure():
    from conv_core.explanation import explain

    problem = crash_problem()
    assert explain(problem, device="cpu").picked == CRASH_KERNEL
    x, w, _ = random_operands(problem, CPU)
    conv_core.conv2d(x, w, padding=1)
    data = explain(problem, device="cpu").to_dict()
    assert data["picked"] == EXAMPLE_KERNEL
    assert data["excluded"] == [{"kernel": CRASH_KERNEL, "reason": f"failed when run: RuntimeError: {RUN_MESSAGE}"}]


def test_backward_with_a_crashing_candidate_still_gives_gradients():
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    w = torch.randn(TRIGGER_OUT_CHANNELS, 4, 3, 3, requires_grad=True)
    conv_core.conv2d(x, w, padding=1).sum().backward()
    x2, w2 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    torch.nn.functional.conv2d(x2, w2, padding=1).sum().backward()
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), w2.grad, rtol=1e-4, atol=1e-4)
    # the three problems of a training step each tried the crashing candidate once, then fell back
    directions = [f.split(" on ")[1].split()[0] for f in backend("broken_run").failures]
    assert directions == ["fwd", "bwd_data", "bwd_weight"]


def test_backends_json_reports_the_run_failure(capsys):
    x, w, _ = random_operands(crash_problem(), CPU)
    conv_core.conv2d(x, w, padding=1)
    assert cli.main(["backends", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["broken_run"]["status"] == "ok"
    assert len(rows["broken_run"]["failures"]) == 1 and RUN_MESSAGE in rows["broken_run"]["failures"][0]


# ---- all of them together ---------------------------------------------------------------------------------


EVERYTHING = {
    "2d-example": small_problem(bias=True, activation="gelu"),
    "2d-crash": crash_problem(stride=2, input_size=(11, 11)),
    "2d-groups": small_problem(groups=2, in_channels=4, out_channels=6, layout="channels_last"),
    "2d-depthwise-crash": crash_problem(in_channels=TRIGGER_OUT_CHANNELS, groups=TRIGGER_OUT_CHANNELS),
    "1d": small_problem(input_size=(17,), filter_size=5, padding=((2, 1),), bias=True, activation="silu"),
    "3d-crash": crash_problem(input_size=(5, 6, 4), filter_size=3, layout="channels_last"),
    "2d-fp16-batch1": small_problem(batch=1, dtype="float16", bias=True, activation="relu6"),
    "2d-bf16-batch2": small_problem(batch=2, dtype="bfloat16", layout="channels_last"),
    "2d-float64": small_problem(dtype="float64", bias=True),
}


@pytest.mark.parametrize("problem", EVERYTHING.values(), ids=EVERYTHING.keys())
def test_public_calls_are_right_with_every_broken_backend_installed(problem):
    x, w, bias = random_operands(problem, CPU, seed=4)
    conv = {1: conv_core.conv1d, 2: conv_core.conv2d, 3: conv_core.conv3d}[problem.ndim]
    with torch.no_grad():
        y = conv(x, w, bias, **call_args(problem))
    assert compare(problem, y, (x, w, bias)).ok
    tolerance = 1e-2 if problem.dtype in ("float16", "bfloat16") else 1e-4
    torch.testing.assert_close(y.double(), torch_conv(x, w, bias, problem), rtol=tolerance, atol=tolerance)
