"""A PNG bar chart of a benchmark: speedup over ``aten`` per layer.

matplotlib is an optional dependency (``pip install 'conv-core[chart]'``):
:func:`require_matplotlib` lets the CLI fail before a long benchmark rather
than after it.
"""

from __future__ import annotations

from pathlib import Path

from .bench import BenchRow


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib():
    """The ``pyplot`` module on the non-interactive Agg backend, or :class:`ChartUnavailable`."""
    try:
        import matplotlib
    except ImportError:
        raise ChartUnavailable("the PNG chart needs matplotlib; install it with: pip install 'conv-core[chart]'") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(rows: list[BenchRow], path: str | Path, title: str = "") -> Path:
    """Grouped bars per layer: the picked candidate's, the fastest candidate's and PyTorch's speedup over aten.

    A bar at 1.0 means "as fast as aten"; a missing bar means that time was not
    measured (an error, or no torch reference for that direction).
    """
    plt = require_matplotlib()
    series = {
        "picked": [r.pick_speedup for r in rows],
        "fastest": [r.speedup for r in rows],
        "torch": [(r.aten_us / r.torch_us) if r.aten_us and r.torch_us else None for r in rows],
    }
    labels = [f"{r.layer} {r.direction_label}" if len({x.direction_label for x in rows}) > 1 else r.layer
              for r in rows]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(rows) + 2), 4.5))
    try:
        for i, (name, values) in enumerate(series.items()):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
            ax.bar(xs, [v if v is not None else 0.0 for v in values], width, label=name)
        ax.axhline(1.0, color="black", linewidth=0.8)
        tallest = max((v for values in series.values() for v in values if v is not None), default=1.0)
        ax.set_ylim(0, max(tallest, 1.0) * 1.15)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("speedup over aten")
        ax.set_title(title or "conv-core bench")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return Path(path)
