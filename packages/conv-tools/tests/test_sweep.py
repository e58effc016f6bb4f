"""The offline configuration sweep's engine (conv_tools.sweep), driven by a small space on the CPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conv_tools import sweep
from conv_core.backends import aten
from conv_core.kit.tables import layer_key, read_swept
from conv_core.problem import ConvProblem
from conv_tools.suites import problems_from_shape

CPU = torch.device("cpu")


def problem(direction: str = "fwd") -> ConvProblem:
    ((_, p),) = problems_from_shape("n2 c8 k8 i9x9 f3x3 p1", dtype="float32", direction=direction)
    return p


def wrong(candidate):
    """The same candidate with a result off by far more than the tolerance."""
    return dataclasses.replace(candidate, run=lambda *a, **k: candidate.run(*a, **k) * 1.5, config="wrong")


def broken():
    raise ValueError("BLOCK_K 64 does not fit 8 channels")


class FakeSpace:
    """Three configurations of one family (right, wrong, unbuildable) plus a right one that may not win."""

    package = "conv_fake"
    families = ("direct", "other")
    default_suites = {"resnet50:1": ("direct",), "sd_vae_decoder:1": ("direct", "other")}
    layouts = ("nhwc",)

    def __init__(self, swept: Path | None = None) -> None:
        self.swept = swept

    def trials(self, p, device, families):
        if "direct" not in families or p.direction != "fwd":
            return []
        right = dataclasses.replace(aten.conv_core_candidates(p, device)[0], backend="fake")  # no fallback leniency
        return [sweep.Trial("direct", "native", {"BLOCK": 1}, lambda: right),
                sweep.Trial("direct", "native", {"BLOCK": 2}, lambda: wrong(right)),
                sweep.Trial("direct", "native", {"BLOCK": 3}, broken),
                sweep.Trial("direct", "atomic", {"BLOCK": 4}, lambda: right, may_win=False)]

    def swept_path(self, arch):
        return self.swept


def test_every_trial_is_gated_and_only_correct_ones_are_timed():
    p = problem()
    rows = sweep.sweep_problem(FakeSpace(), p, CPU, frozenset({"direct"}), reps=2)
    assert [r["raw"]["BLOCK"] for r in rows] == [1, 2, 3, 4]
    right, off, unbuildable, atomic = rows
    assert right["us"] > 0 and right["error"] is None
    assert right["layer"] == layer_key(p) == p.key.rsplit(" ", 1)[0]
    assert off["us"] is None and off["config"] == "wrong" and off["error"]
    assert unbuildable["us"] is None and unbuildable["error"].startswith("ValueError: BLOCK_K 64")
    assert atomic["us"] > 0 and atomic["may_win"] is False


def test_a_family_not_selected_or_a_declined_problem_is_not_run():
    assert sweep.sweep_problem(FakeSpace(), problem(), CPU, frozenset({"other"}), reps=1) == []
    assert sweep.sweep_problem(FakeSpace(), problem(direction="bwd_data"), CPU, frozenset({"direct"}), reps=1) == []


def rows_for(layer, *timings):
    return [{"family": "direct", "layer": layer, "raw": {"BLOCK": b}, "us": us, "may_win": may_win}
            for b, us, may_win in timings]


def test_winners_are_the_fastest_correct_configuration_that_may_win():
    rows = (rows_for("a", (1, 5.0, True), (2, None, True), (3, 2.0, False), (4, 4.0, True))
            + rows_for("b", (1, 1.0, True), (2, 3.0, True)))
    assert sweep.winners(rows) == {"direct": {"a": {"BLOCK": 4}, "b": {"BLOCK": 1}}}


def test_merge_keeps_earlier_winners_and_marks_the_file_measured(tmp_path):
    out = tmp_path / "swept" / "sm_90.json"
    out.parent.mkdir()
    out.write_text(json.dumps({"layers": {"direct": {"old": {"BLOCK": 9}, "a": {"BLOCK": 8}}}}))
    results = tmp_path / "sweep.json"
    results.write_text(json.dumps({"arch": "sm_90", "device": "NVIDIA H100", "results": rows_for("a", (1, 2.0, True))}))
    assert sweep.main(FakeSpace(out), ["merge", str(results)]) == 0
    written = json.loads(out.read_text())
    assert written["measured"] is True and written["arch"] == "sm_90"
    assert written["layers"] == {"direct": {"old": {"BLOCK": 9}, "a": {"BLOCK": 1}}}


def test_selection_defaults_to_each_suites_own_families_and_rejects_unknown_ones():
    space = FakeSpace()
    assert sweep.selection(space, None, None) == {"resnet50:1": {"direct"}, "sd_vae_decoder:1": {"direct", "other"}}
    assert sweep.selection(space, "other", None) == {"resnet50:1": set(), "sd_vae_decoder:1": {"other"}}
    assert sweep.selection(space, None, "convnext_block:2") == {"convnext_block:2": {"direct", "other"}}
    with pytest.raises(SystemExit, match="unknown families"):
        sweep.selection(space, "direct,winograd", None)


def test_suite_layers_take_the_batch_and_every_direction():
    problems = list(sweep.suite_layers("resnet50:2", ["fwd", "bwd_weight"], "channels_last", "bfloat16", "sm_90"))
    assert {p.batch for p in problems} == {2}
    assert {p.direction for p in problems} == {"fwd", "bwd_weight"}
    assert all(p.layout == "channels_last" and p.dtype == "bfloat16" and p.arch == "sm_90" for p in problems)


def test_read_swept_of_a_missing_file_is_empty(tmp_path):
    assert read_swept(tmp_path / "none.json") == {}


def test_the_reference_is_computed_once_per_layer_not_per_trial(monkeypatch):
    calls = []
    real = sweep.expected
    monkeypatch.setattr(sweep, "expected", lambda *a: calls.append(a) or real(*a))
    rows = sweep.sweep_problem(FakeSpace(), problem(), CPU, frozenset({"direct"}), reps=1)
    assert len(rows) == 4 and len(calls) == 1
