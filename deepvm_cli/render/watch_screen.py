"""How `deepvm watch` draws a job: one screen of text sized to the terminal (80 x 24 and up), or plain lines.

The screen, top to bottom: the job's line (state, step, ETA); the loss curve with the money beside it ($/h
now, so far, projected, what on-demand would have cost) and the job's other metrics as sparklines; the
nodes by role, market, type, zone and state; the newest events of the cluster's timeline (notices,
replacements, relaunches, fallbacks). Every line is cut to the width and the whole to the height, so the
terminal never scrolls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.text import Text

from deepvm_cli.render.chart import line_chart, sparkline
from deepvm_cli.render.job import describe_progress
from deepvm_cli.render.watch_model import WatchModel
from deepvm_cli.ui.console import duration
from training.shared.watch_records import Money, NodeView, TimelineEntry

SIDE = 30  # columns beside the chart: the money and the other metrics
CHART_ROWS = 8
_KIND_STYLE = {
    "notice": "yellow",
    "node-lost": "red",
    "stall": "red",
    "retired": "red",
    "recovered": "green",
    "replacement": "cyan",
    "completed": "green",
    "fallback": "magenta",
    "shortage": "magenta",
}


def screen(model: WatchModel, width: int, height: int) -> Text:
    """The whole view within `width` columns and `height` rows."""
    nodes = _node_lines(model.snapshot.nodes if model.snapshot else ())
    chart_rows = max(3, min(CHART_ROWS, height - 1 - 1 - (1 + len(nodes)) - 3))
    node_rows = max(0, min(len(nodes), height - 1 - (1 + chart_rows) - 1 - 3))
    lines: list[Text] = [Text(job_line(model), style="bold")]
    lines += _chart_block(model, width, chart_rows)
    lines.append(Text(f"nodes ({_count_line(model)})", style="bold"))
    lines += [Text(n) for n in nodes[:node_rows]]
    room = height - len(lines) - 1
    timeline = model.snapshot.timeline if model.snapshot else ()
    lines.append(Text("timeline" + ("" if timeline else ": nothing has happened to the cluster yet"), style="bold"))
    lines += [_timeline_text(e) for e in timeline[-room:]] if room > 0 else []
    out = Text()
    for i, line in enumerate(lines[:height]):
        line.truncate(width, overflow="ellipsis")
        out.append_text(line)
        if i < min(len(lines), height) - 1:
            out.append("\n")
    return out


def job_line(model: WatchModel) -> str:
    p = model.progress
    if p is not None and p.script is not None:  # a launched script without steps: what is known of it instead
        step = describe_progress(p)
    else:
        step = f"step {p.step}/{p.total_steps}" if p else "no step yet"
    if model.status.final:  # the log's last state record says how it ended, e.g. "completed: step 60/60"
        return f"{model.job_id} · {model.ended or model.status.value}" + ("" if model.ended else f" · {step}")
    eta = f" · eta {duration(model.eta_s)}" if model.eta_s is not None else ""
    return f"{model.job_id} · {model.status.value} · {step}{eta}"


def plain_line(model: WatchModel) -> str:
    """The view as one line, for output that is not a terminal (printed every few seconds)."""
    loss = model.loss_curve
    parts = [job_line(model)]
    if loss:
        parts.append(f"loss {loss[-1][1]:.4f}")
    parts += [f"{name} {points[-1][1]:.4g}" for name, points in model.other_curves.items() if points]
    if model.snapshot is not None:
        money, projected = model.snapshot.money, model.projected_usd
        parts += [
            f"${money.usd_per_hour:.4f}/h now",
            f"${money.usd:.4f} so far",
            "projected " + ("-" if projected is None else f"${projected:.4f}"),
            _on_demand(money),
        ]
        parts.append(_count_line(model))
    return " · ".join(parts)


def timeline_line(entry: TimelineEntry) -> str:
    return _timeline_text(entry).plain


def _chart_block(model: WatchModel, width: int, rows: int) -> list[Text]:
    loss = model.loss_curve
    chart_width = max(10, width - SIDE - 1)
    if loss:
        values = [v for _, v in loss]
        title = f"loss {loss[-1][1]:.4f} at step {loss[-1][0]} (from {max(values):.4g} to {min(values):.4g})"
    else:
        title = "loss: no step logged yet"
    chart = line_chart(loss, chart_width, rows)
    side = _money_lines(model.snapshot.money, model.projected_usd) if model.snapshot else ["(waiting for the head)"]
    side = [*side, *_metric_lines(model, SIDE)][:rows]
    side += [""] * (rows - len(side))
    return [Text(title, style="bold")] + [Text(f"{row} ", style="cyan") + Text(s) for row, s in zip(chart, side)]


def _money_lines(money: Money, projected: float | None) -> list[str]:
    on_demand = "unknown" if money.on_demand_usd is None else f"${money.on_demand_usd:.4f}"
    lines = [
        f"$/h now      ${money.usd_per_hour:.4f}",
        f"so far       ${money.usd:.4f}",
        "projected    " + ("-" if projected is None else f"${projected:.4f}"),
        f"on-demand    {on_demand}",
    ]
    if money.on_demand_usd:
        lines.append(f"saved        {_saved(money)}")
    return lines


def _on_demand(money: Money) -> str:
    if money.on_demand_usd is None:
        return "on-demand unknown"
    return f"on-demand ${money.on_demand_usd:.4f}" + (f" ({_saved(money)} less)" if money.on_demand_usd else "")


def _saved(money: Money) -> str:
    return f"{100 * (1 - money.usd / (money.on_demand_usd or 1)):.0f}%"


def _metric_lines(model: WatchModel, width: int) -> list[str]:
    lines = []
    for name, points in model.other_curves.items():
        if points:
            head = f"{name[:12]:<12} {points[-1][1]:<8.4g} "
            lines.append(head + sparkline([v for _, v in points], width - len(head)))
    return lines


def _node_lines(nodes: Sequence[NodeView]) -> list[str]:
    """One line per role, market, type, zone and state, with how many nodes are so; running ones first."""
    groups = Counter((n.role.value, n.market.value, n.instance_type, n.zone, n.state) for n in nodes)
    order = sorted(groups, key=lambda g: (g[4] != "running", g))
    return [f"{groups[g]:>2} x {g[0]:<8} {g[1]:<9} {g[2]:<14} {g[3]:<12} {g[4]}" for g in order]


def _count_line(model: WatchModel) -> str:
    nodes = [n for n in model.snapshot.nodes if n.state == "running"] if model.snapshot else []
    markets = Counter(n.market.value for n in nodes)
    return f"{len(nodes)} running: " + (", ".join(f"{c} {m}" for m, c in sorted(markets.items())) or "none")


def _timeline_text(entry: TimelineEntry) -> Text:
    clock = entry.at[11:19] if len(entry.at) >= 19 else entry.at
    line = Text(f"{clock} ")
    line.append(f"{entry.kind:<11}", style=_KIND_STYLE.get(entry.kind, ""))
    line.append(f" {entry.text}")
    return line
