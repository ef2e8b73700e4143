"""`deepvm simulate --plot`: cost and makespan CDFs per policy, the picture a person would rather read.

The runs' outcomes are drawn as empirical CDFs: how likely the job is to finish within a time, or a
budget; a deadline is a dotted line. matplotlib is imported only by deepvm_cli/render/png.py, when asked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deepvm_cli.render.png import png_figure
from simulation.compare import Comparison


def plot_cdfs(comparison: Comparison, path: Path) -> None:
    """Write a PNG of the makespan and cost CDFs of each policy compared."""
    report = comparison.report
    with png_figure(path, 110, ncols=2, figsize=(11, 4.5), constrained_layout=True) as (figure, (left, right)):
        for summary, runs in zip(report.policies, comparison.outcomes):
            share = np.arange(1, runs.runs + 1) / runs.runs
            left.step(np.sort(runs.makespan_h), share, where="post", label=summary.policy.value)
            right.step(np.sort(runs.cost_usd), share, where="post", label=summary.policy.value)
        if report.deadline_h is not None:
            left.axvline(report.deadline_h, color="black", linestyle=":", label=f"deadline {report.deadline_h:g} h")
        left.set_xlabel("makespan (hours)")
        right.set_xlabel("cost (USD)")
        for axes in (left, right):
            axes.set_ylabel("share of runs finished within")
            axes.set_ylim(0, 1.0)
            axes.grid(alpha=0.3)
        left.legend(fontsize="small", loc="lower right")
        figure.suptitle(
            f"deepvm simulate: {report.work_pflop:,.0f} PFLOP, {report.runs} runs (seed {report.seed}), "
            f"trace {report.trace}",
            fontsize="medium",
        )
