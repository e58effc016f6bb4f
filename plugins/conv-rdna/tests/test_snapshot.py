"""conv-rdna's candidates for fixed problems are those of its committed snapshots (``snapshots/``): ids,
estimates, tags, workspace, error factors and plans, so that a change meant to keep behaviour shows that it does
(:mod:`conv_core.testing.snapshot` says how to write one again)."""

from pathlib import Path

from conv_core.testing.snapshot import snapshot_test

from conv_rdna.candidates import candidates

SNAPSHOTS = Path(__file__).parent / "snapshots"
test_the_candidates_are_the_snapshots = snapshot_test(candidates, SNAPSHOTS, ["sm_90", "gfx1100"])
