"""`deepvm check`'s report on the screen: one table of ✓/✗/? rows under their sections, then the fix for each
✗ (one line each) and the counts. Everything goes to stdout: the report is the command's answer."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from deepvm_cli.ui import console
from provisioning.account.report import MISSING, READY, CheckReport, Mark, Section

_TITLES = {
    Section.RIGHTS: "rights: each IAM action `plan`, `up`, `train` and `down` call with your credentials",
    Section.QUOTAS: "quotas: what the plan needs of the cloud",
}
_VERDICTS = {READY: "ready", MISSING: "not ready: fix the ✗ rows"}


def render_check(report: CheckReport, strict: bool) -> None:
    console.out.print(f"deepvm check: {report.cloud.value}, {report.region}", markup=False)
    width = min(40, max(len(row.name) for row in report.rows))  # one "what" column for every section
    for section in Section:
        rows = [row for row in report.rows if row.section is section]
        if not rows:
            continue
        console.out.print(Text(_TITLES.get(section, section.value), style="bold"))
        table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
        table.add_column("", no_wrap=True)
        table.add_column("what", overflow="fold", width=width)
        table.add_column("found", overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in (row.mark.value, row.name, row.detail)))
        console.out.print(table)
    missing = [row for row in report.rows if row.mark is Mark.MISSING]
    if missing:
        console.out.print("to fix:", markup=False)
        for row in missing:
            console.out.print(f"  ✗ {row.name}: {row.fix}", markup=False, soft_wrap=True)
    counts = ", ".join(f"{report.count(mark)} {mark.value}" for mark in Mark)
    verdict = _VERDICTS.get(report.exit_code(strict), "nothing ✗, but --strict counts each ? against it")
    console.out.print(f"{counts}: {verdict}", markup=False)
