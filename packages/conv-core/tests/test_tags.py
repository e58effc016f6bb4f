"""Every tag of ``KNOWN_TAGS`` is acted on by the core, and a test here or elsewhere shows how.

A tag documented as understood but read nowhere is a promise the core does not keep; a backend's own
tags (not in ``KNOWN_TAGS``) are accepted and change nothing.
"""

from pathlib import Path

import torch

from conv_core import ConvProblem
from conv_core.candidate import KNOWN_TAGS, Candidate, check_candidate
from conv_core.engine import Engine
from conv_core.plugins import Registry
from conv_core.ranking import Ranked, Ranking
from conv_core.settings import Settings

HERE = Path(__file__).resolve().parent

#: Tag -> (test file, test) that shows what the core does with it.
SHOWN_BY = {
    "deterministic": ("test_reference.py", "test_flaky_candidate_passes_without_deterministic_tag"),
    "cuda_graph_safe": ("test_tags.py", "test_a_capture_runs_the_first_cuda_graph_safe_candidate"),
    "needs_workspace": ("test_conformance_aten.py", "test_metadata_problems_are_found"),
    "atomics": ("test_registry.py", "test_deterministic_mode_excludes_atomics_whatever_the_setting"),
    "experimental": ("test_registry.py", "test_ranking_orders_by_time_then_id_and_experimental_last"),
    "direct": ("test_routes.py", "test_where_aten_ranks_first_the_call_is_pytorchs_own_convolution"),
    "tf32": ("test_reference.py", "test_tf32_rounding_needs_the_tf32_tag"),
}

PROBLEM = ConvProblem("fwd", 1, 2, 2, (4, 4), (3, 3), 1, 1, 1)


def test_every_known_tag_has_a_test_of_what_the_core_does_with_it():
    assert set(SHOWN_BY) == set(KNOWN_TAGS)
    for tag, (file, test) in SHOWN_BY.items():
        source = (HERE / file).read_text()
        assert f"def {test}(" in source, f"{tag}: {file} has no {test}"
        assert tag in source, f"{tag}: {file} never names the tag"


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
