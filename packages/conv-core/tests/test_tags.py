"""Every tag of ``KNOWN_TAGS`` changes what the core does, shown here tag by tag: the same candidate with and
without the tag gets another verdict, order or path.

A tag documented as understood but acted on nowhere is a promise the core does not keep; a backend's own
tags (not in ``KNOWN_TAGS``) are accepted and change nothing.
"""

import dataclasses
import math

import pytest
import torch

from conv_core import ConvProblem
from conv_core.backends import aten
from conv_core.candidate import KNOWN_TAGS, Candidate, check_candidate
from conv_core.engine import Engine
from conv_core.plugins import Registry
from conv_core.ranking import Ranked, Ranking, rank
from conv_core.frontend.routes import aten_route_wins
from conv_core.settings import Settings
from conv_core.testing import check_candidate as conformance
from conv_core.testing.checks import check_metadata
from conv_core.testing.fakes import EntryPointOf, Plugin, zeros_run
from conv_core.tuning import Timings

PROBLEM = ConvProblem("fwd", 1, 2, 2, (4, 4), (3, 3), 1, 1, 1)
CPU = torch.device("cpu")


def exact(problem: ConvProblem, tags=(), name="k", estimate_us=1.0, run=None) -> Candidate:
    """A candidate computing ``problem`` exactly (aten's own run, or ``run``) under another backend's name."""
    (base,) = aten.conv_core_candidates(problem, CPU)
    return Candidate("fake", name, "c", run or base.run, estimate_us=estimate_us, tags=frozenset(tags))


def order(candidates, tmp_path, **switches) -> list[str]:
    timings = Timings("cpu", "cpu", {}, tmp_path / "none.json", [])
    return [r.kernel_id for r in rank(PROBLEM, candidates, [], timings, trust_estimates=True, **switches).ranked]


def deterministic_changes_the_verdict(tmp_path, monkeypatch) -> None:
    """The conformance kit runs a ``deterministic`` candidate twice and fails it if the bits differ."""
    def flaky_run():
        (base,) = aten.conv_core_candidates(PROBLEM, CPU)
        calls = []

        def run(a, b, bias=None, *, out=None):
            result = base.run(a, b, bias, out=out)
            if not calls:
                result.view(-1)[0] = torch.nextafter(result.view(-1)[0], torch.tensor(math.inf))
            calls.append(1)
            return result
        return run

    assert conformance(PROBLEM, exact(PROBLEM, run=flaky_run()), CPU).ok
    assert not conformance(PROBLEM, exact(PROBLEM, {"deterministic"}, run=flaky_run()), CPU).ok


def needs_workspace_changes_the_verdict(tmp_path, monkeypatch) -> None:
    """The tag and ``workspace_bytes`` must agree: scratch memory without the tag is reported."""
    (good,) = aten.conv_core_candidates(PROBLEM, CPU)
    untagged = dataclasses.replace(good, workspace_bytes=64)
    tagged = dataclasses.replace(untagged, tags=good.tags | {"needs_workspace"})
    assert any("needs_workspace" in issue for issue in check_metadata(PROBLEM, untagged, "cpu"))
    assert not any("needs_workspace" in issue for issue in check_metadata(PROBLEM, tagged, "cpu"))


def atomics_changes_the_order(tmp_path, monkeypatch) -> None:
    """Faster with atomics still ranks after the candidates without; deterministic mode excludes it."""
    fast, slow = exact(PROBLEM, {"atomics"}, "fast", 1.0), exact(PROBLEM, (), "slow", 2.0)
    assert order([fast, slow], tmp_path) == ["fake:slow:c", "fake:fast:c"]
    assert order([dataclasses.replace(fast, tags=frozenset()), slow], tmp_path) == ["fake:fast:c", "fake:slow:c"]
    assert order([fast, slow], tmp_path, deterministic_mode=True) == ["fake:slow:c"]


def experimental_changes_the_order(tmp_path, monkeypatch) -> None:
    fast, slow = exact(PROBLEM, {"experimental"}, "fast", 1.0), exact(PROBLEM, (), "slow", 2.0)
    assert order([fast, slow], tmp_path) == ["fake:slow:c", "fake:fast:c"]


def direct_changes_the_path(tmp_path, monkeypatch) -> None:
    """A call whose every direction ranks a ``direct`` candidate first is PyTorch's own convolution."""
    (native,) = aten.conv_core_candidates(PROBLEM, CPU)
    assert "direct" in native.tags
    untagged = dataclasses.replace(native, tags=native.tags - {"direct"})
    assert aten_route_wins([Ranking(PROBLEM, [Ranked(native, 1.0, "estimate")])])
    assert not aten_route_wins([Ranking(PROBLEM, [Ranked(untagged, 1.0, "estimate")])])


def tf32_changes_the_verdict(tmp_path, monkeypatch) -> None:
    """float32 operands rounded to tf32 fail the float32 tolerance, and pass tf32's with the tag."""
    problem = PROBLEM.replace(in_channels=8, dtype="float32", bias=False)
    (base,) = aten.conv_core_candidates(problem, CPU)

    def tf32(t):  # round to tf32's 10 mantissa bits
        return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)

    def run(a, b, bias=None, *, out=None):
        return base.run(tf32(a), tf32(b), bias, out=out)

    assert not conformance(problem, exact(problem, run=run), CPU).ok
    assert conformance(problem, exact(problem, {"tf32"}, run=run), CPU).ok


def cuda_graph_safe_changes_the_path(tmp_path, monkeypatch) -> None:
    test_a_capture_runs_the_first_cuda_graph_safe_candidate(monkeypatch, tmp_path)


def transposed_epilogue_changes_what_is_offered(tmp_path, monkeypatch) -> None:
    """A data gradient with an epilogue reaches only the candidates that apply it; without one, every candidate."""
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(tmp_path / "db.json"))
    plain, tagged = Plugin("plain", zeros_run), Plugin("tagged", zeros_run, tags={"transposed_epilogue"})
    registry = Registry(Settings.from_env(), [EntryPointOf("plain", plain), EntryPointOf("tagged", tagged)])
    bare = PROBLEM.with_direction("bwd_data")
    offered = {c.backend for c in registry.candidates(bare, CPU)[0]}
    assert offered == {"aten", "plain", "tagged"}
    candidates, declined = registry.candidates(bare.replace(bias=True, activation="relu"), CPU)
    assert {c.backend for c in candidates} == {"aten", "tagged"}
    assert [d.backend for d in declined] == ["plain"] and "transposed_epilogue" in declined[0].reason


SHOWN = {"deterministic": deterministic_changes_the_verdict, "needs_workspace": needs_workspace_changes_the_verdict,
         "atomics": atomics_changes_the_order, "experimental": experimental_changes_the_order,
         "direct": direct_changes_the_path, "tf32": tf32_changes_the_verdict,
         "cuda_graph_safe": cuda_graph_safe_changes_the_path,
         "transposed_epilogue": transposed_epilogue_changes_what_is_offered}


def test_every_known_tag_is_shown_here():
    assert set(SHOWN) == set(KNOWN_TAGS)


@pytest.mark.parametrize("tag", sorted(KNOWN_TAGS))
def test_the_tag_changes_what_the_core_does(tag, tmp_path, monkeypatch):
    SHOWN[tag](tmp_path, monkeypatch)


class CudaLike:
    """An operand that says it is on a GPU; the candidates below never look at it."""

    is_cuda = True


def candidate(name: str, tags=()) -> Candidate:
    return Candidate("fake", name, "c", lambda a, b, out=None: name, estimate_us=1.0, tags=frozenset(tags))


def test_a_capture_runs_the_first_cuda_graph_safe_candidate(monkeypatch, tmp_path):
    settings = Settings(allow=None, block=frozenset(), force_backend=None, trace=False,
                        tuning_db=tmp_path / "db.json", benchmark=False, nondeterministic=False)
    engine = Engine(settings, Registry(settings, []))
    ranked = [Ranked(candidate("first"), 1.0, "estimate"), Ranked(candidate("safe", {"cuda_graph_safe"}), 2.0,
                                                                  "estimate")]
    ranking = Ranking(PROBLEM, ranked)
    operands = (CudaLike(), CudaLike())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert engine.execute(ranking, operands) == "first"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert engine.execute(ranking, operands) == "safe"
    ranking.ranked[1] = Ranked(candidate("unsafe"), 2.0, "estimate")
    assert engine.execute(ranking, operands) == "first"  # none is safe: the first of all still runs


def test_a_backends_own_tag_is_accepted():
    assert "interpreted" not in KNOWN_TAGS  # conv-rdna's tag for kernels run by Triton's interpreter
    own = candidate("own", {"interpreted"})
    assert check_candidate(own, "fake") is own
