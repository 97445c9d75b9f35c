"""How `mylm batch` shows progress: a live line on a terminal (rich), plain lines, or JSON events."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any

from ..core.words import counted

if TYPE_CHECKING:
    from ..batch import BatchEvent, BatchStart, BatchSummary, Progress, Snapshot


def duration(seconds: float | None) -> str:
    """`1h02m`, `4m10s`, `12s`, or `?` when unknown."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


def status_line(snap: Snapshot) -> str:
    """done/total, running, failed, tasks/min, ETA and tokens/s on one line."""
    return (
        f"{snap.done}/{snap.total} done, {snap.running} running, {snap.failed} failed, "
        f"{snap.tasks_per_min:.1f} tasks/min, ETA {duration(snap.eta_s)}, {snap.tokens_per_s:.0f} tokens/s"
    )


class View:
    """Receives the batch's events; `close` prints the summary."""

    def __init__(self, progress: Progress, err: IO[str], clean: Callable[[str], str]) -> None:
        self.progress = progress
        self.err = err
        self.clean = clean

    def handle(self, event: BatchEvent) -> None:
        """Show one event."""

    def note(self, text: str) -> None:
        """A line on stderr that stays."""
        self.err.write(text + "\n")
        self.err.flush()

    def close(self, summary: BatchSummary) -> None:
        """Stop live output and print the summary table."""
        self.note(summary_table(summary))

    def abort(self) -> None:
        """Stop live output without a summary (the batch failed or was killed)."""

    def task_line(self, event: Any) -> str:
        record = event.record
        reason = record["stop_reason"]
        done = self.progress.snapshot().done
        line = f"[{done}/{self.progress.total}] {event.id}: {reason} in {record['wall_s']:.1f}s"
        if record.get("error"):
            # One line per task: the first line of the error, cut short (the result line has it whole).
            error = str(record["error"]).strip().splitlines()[0]
            line += f": {error if len(error) <= 160 else error[:159] + '…'}"
        return self.clean(line)


class PlainView(View):
    """One line per task that ends, with the progress figures: for logs and pipes."""

    def handle(self, event: BatchEvent) -> None:
        kind = event.type
        if kind == "task_end":
            self.note(f"{self.task_line(event)} ({status_line(self.progress.snapshot())})")
        elif kind == "task_retry":
            self.note(self.clean(f"retrying {event.id} (attempt {event.attempt}): {event.error}"))  # type: ignore[union-attr]
        elif kind == "rate_limited":
            self.note(f"the endpoint asked to slow down: waiting {event.delay:g}s, "  # type: ignore[union-attr]
                      f"{counted(event.limit, 'request')} at a time")  # type: ignore[union-attr]
        elif kind == "batch_stopping":
            self.note("stopping: no new tasks; cancelling the running ones (Ctrl-C again to quit at once)")
        elif kind == "batch_start":
            self.note(start_line(event))  # type: ignore[arg-type]


def tally(failures: Mapping[str, int]) -> str:
    """`2 timed out, 1 endpoint error`: failed tasks by how they failed (`mylm.batch.runner.failure`), most first."""
    ordered = sorted(failures.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(counted(n, how) if how.endswith("error") else f"{n:,} {how}" for how, n in ordered)


def start_line(event: BatchStart) -> str:
    """`batch: 2 tasks to run again: 1 timed out, 1 endpoint error; 3 already done, 4 at a time`."""
    again = sum(event.again.values())
    why = tally(event.again)
    if again and again == event.total:
        line = f"batch: {counted(event.total, 'task')} to run again: {why}"
    elif again:
        line = f"batch: {counted(event.total, 'task')} to run, {again} of them again: {why}"
    else:
        line = f"batch: {counted(event.total, 'task')} to run"
    if event.skipped:
        line += f"{';' if again else ','} {event.skipped} already done"
    return f"{line}, {event.concurrency} at a time"


class LiveView(PlainView):
    """A live progress line at the foot of the terminal (rich, imported only here), finished tasks above."""

    def __init__(self, progress: Progress, err: IO[str], clean: Callable[[str], str]) -> None:
        super().__init__(progress, err, clean)
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self._console = Console(file=err, highlight=False, soft_wrap=True)
        self._live = Live(
            get_renderable=lambda: Text(status_line(self.progress.snapshot()), style="bold"),
            console=self._console, refresh_per_second=4, transient=True, redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def note(self, text: str) -> None:
        from rich.text import Text

        self._console.print(Text(text))

    def abort(self) -> None:
        self._live.stop()

    def close(self, summary: BatchSummary) -> None:
        self._live.stop()
        from rich.table import Table

        table = Table(title="mylm batch", show_header=False)  # the rows name themselves: no empty header row
        table.add_column("")
        table.add_column("", justify="right")
        for name, value in summary_rows(summary):
            table.add_row(name, value)
        self._console.print(table)


class JsonView(View):
    """Every event as one JSON object per line on `out`, for programs; the summary too."""

    def __init__(self, progress: Progress, err: IO[str], clean: Callable[[str], str], out: IO[str]) -> None:
        super().__init__(progress, err, clean)
        self.out = out

    def handle(self, event: BatchEvent) -> None:
        data = event.to_dict()
        if event.type in ("task_end", "batch_end"):
            data["progress"] = _progress_dict(self.progress.snapshot())
        self.out.write(json.dumps(data, ensure_ascii=False) + "\n")
        self.out.flush()

    def close(self, summary: BatchSummary) -> None:
        """Nothing more to write: the `batch_end` event already carried the summary."""


def _progress_dict(snap: Snapshot) -> dict[str, Any]:
    eta = snap.eta_s
    return {"done": snap.done, "total": snap.total, "running": snap.running, "failed": snap.failed,
            "tasks_per_min": round(snap.tasks_per_min, 2), "eta_s": None if eta is None else round(eta, 1),
            "tokens_per_s": round(snap.tokens_per_s, 1)}


def summary_rows(summary: BatchSummary) -> list[tuple[str, str]]:
    """The summary as (name, value) rows: counts by how tasks ended, then rates."""
    counts: dict[str, int] = {}
    for record in summary.records:
        counts[record["stop_reason"]] = counts.get(record["stop_reason"], 0) + 1
    rows = [(f"ended: {reason}", str(n)) for reason, n in sorted(counts.items())]
    minutes = summary.wall_s / 60
    rows += [("tasks finished now", str(summary.done)), ("failed (error, timeout)", str(summary.failed))]
    if summary.again:
        rows.append(("run again (had failed)", str(sum(summary.again.values()))))
    rows += [
        ("skipped (already done)", str(summary.skipped)),
        ("not run (interrupted)", str(summary.remaining)),
        ("wall time", duration(summary.wall_s)),
        ("tasks/min", f"{summary.done / minutes:.1f}" if minutes > 0 else "-"),
        ("tokens/s", f"{summary.tokens / summary.wall_s:.0f}" if summary.wall_s > 0 else "-"),
    ]
    if summary.rate_limited:
        rows.append(("429 answers (batch slowed down)", str(summary.rate_limited)))
    return rows


def summary_table(summary: BatchSummary) -> str:
    """The summary rows as aligned plain text."""
    rows = summary_rows(summary)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value:>8}" for name, value in rows)


def make_view(progress: Progress, *, as_json: bool, live: bool, clean: Callable[[str], str]) -> View:
    """The view for this run: JSON events on stdout, a live line on a terminal, else plain lines."""
    if as_json:
        return JsonView(progress, sys.stderr, clean, sys.stdout)
    if live:
        return LiveView(progress, sys.stderr, clean)
    return PlainView(progress, sys.stderr, clean)
