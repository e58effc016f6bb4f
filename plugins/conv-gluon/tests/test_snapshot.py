"""conv-gluon's candidates for fixed problems are those of its committed snapshot: ids, estimates, tags, workspace,
error factors and plans (every launch's kernel, grid, arguments and options), so that a change meant to keep
behaviour (a refactoring) shows that it does. A change meant to alter them writes the snapshot again::

    TRITON_INTERPRET=1 python -m conv_core.testing.snapshot conv_gluon.candidates:candidates KEYS \
        --out tests/snapshots/candidates_ARCH.json

with KEYS the snapshot's own problem keys, one per line, and says why in its commit."""

from pathlib import Path

import pytest
from conv_core.testing.snapshot import differences

from conv_gluon.candidates import candidates

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("arch", ["sm_90"])
def test_the_candidates_are_the_snapshots(arch):
    assert differences(SNAPSHOTS / f"candidates_{arch}.json", candidates) == []
