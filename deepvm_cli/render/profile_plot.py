"""`deepvm profile --plot`: the measured speed-ups and the fitted curve, as a PNG.

The curve is drawn solid over the nodes measured and dashed beyond, up to where plans follow it (1.5x
the most nodes measured), so the picture shows how much of a plan rests on extrapolation. matplotlib
is imported only by deepvm_cli/render/png.py, when a plot is asked for.
"""

from __future__ import annotations

from pathlib import Path

from deepvm_cli.render.png import png_figure
from provisioning.scaling.model import speedup
from provisioning.scaling.profile import Profile


def plot_profile(profile: Profile, path: Path) -> None:
    """Draw every repeat's speed-up, the means, the fitted S(n) and linear scaling for reference."""
    with png_figure(path, 120, figsize=(6.4, 4.4)) as (figure, axes):
        _draw(profile, figure, axes)


def _draw(profile: Profile, figure, axes) -> None:
    curve, fit = profile.scaling(), profile.fit
    one = profile.sizes[0].samples_per_s
    base = sum(one) / len(one)
    repeats = [(size.nodes, rate / base) for size in profile.sizes for rate in size.samples_per_s]
    axes.scatter([n for n, _ in repeats], [s for _, s in repeats], s=14, alpha=0.5, label="each repeat")
    axes.plot([s.nodes for s in profile.sizes], [s.speedup for s in profile.sizes], "o", label="mean")
    measured = fit.max_nodes_measured
    inside = [1 + i * (measured - 1) / 200 for i in range(201)]
    beyond = [measured + i * (profile.node_bound - measured) / 50 for i in range(51)]
    axes.plot(
        inside,
        [speedup(curve, n) for n in inside],
        "-",
        color="C3",
        label=f"S(n): a={fit.a.value:.3g}, b={fit.b.value:.3g}, c={fit.c.value:.3g} (RMSE {fit.rmse:.3f})",
    )
    if profile.node_bound > measured:
        axes.plot(beyond, [speedup(curve, n) for n in beyond], "--", color="C3", label="extrapolated, as plans use it")
    axes.plot([1, profile.node_bound], [1, profile.node_bound], ":", color="grey", label="linear")
    axes.set_xlabel(f"{profile.instance_type} nodes")
    axes.set_ylabel("speed-up over 1 node")
    axes.set_title(f"{profile.job.name} on {profile.instance_type} ({profile.measured_at[:10]})")
    highest = max([s for _, s in repeats] + [speedup(curve, n) for n in inside + beyond])
    axes.set_ylim(0, 1.25 * highest + 0.25)  # linear scaling runs off a poor job's chart: its curve matters
    axes.legend(fontsize="small")
    figure.tight_layout()
