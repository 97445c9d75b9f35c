"""Running a tool where the run can abandon it: at the run's deadline or on cancel, without waiting for it."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Mapping

from ..cancel import CancelToken, remaining
from ..errors import CancelledError
from .base import Tool, ToolContext, ToolOutcome, run_tool

#: After a cancel, how long a tool may take to notice its token and return what it did (a bound, not a delay:
#: a cooperative tool returns at once, and its output is kept).
CANCEL_GRACE = 2.0


def run_bounded(tool_: Tool, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutcome:
    """Run `tool_` in a worker thread, waiting for it only until `context.deadline` or `context.cancel`.

    Python cannot stop a thread, so a tool that overruns is abandoned: it keeps running in its daemon thread
    until it returns by itself, and whatever it returns then is dropped. The tool gets its own cancel token,
    set when the run is cancelled or the tool is abandoned, so a tool that checks `context.cancel` (or
    `context.time_left()`) stops early. An overrun is reported as an error outcome. On a cancel the tool has
    up to `CANCEL_GRACE` seconds to return (its outcome is then kept), else `CancelledError` is raised;
    Ctrl-C (KeyboardInterrupt) while waiting cancels the tool's token and propagates.
    """
    own = CancelToken()
    wake = threading.Event()  # the tool finished, or the run was cancelled
    finished = threading.Event()
    box: list[ToolOutcome | BaseException] = []

    def work() -> None:
        try:
            box.append(run_tool(tool_, arguments, replace(context, cancel=own)))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which re-raises it
            box.append(error)
        finally:
            finished.set()
            wake.set()

    def cancelled() -> None:
        own.cancel()
        wake.set()

    started = time.monotonic()
    unregister = context.cancel.on_cancel(cancelled) if context.cancel is not None else (lambda: None)
    try:
        threading.Thread(target=work, name=f"mylm-tool-{tool_.name}", daemon=True).start()
        while not box:
            left = remaining(context.deadline)
            if left <= 0 or (context.cancel is not None and context.cancel.cancelled):
                break
            # Bounded slices: an infinite wait would not wake for Ctrl-C on every platform.
            wake.wait(min(left, 1.0))
    except BaseException:
        # Ctrl-C: stop the tool, and let it clean up (kill and reap its processes) before the run goes on.
        own.cancel()
        finished.wait(CANCEL_GRACE)
        raise
    finally:
        unregister()
    if box:
        outcome = box[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    own.cancel()
    if context.cancel is not None and context.cancel.cancelled:
        if finished.wait(CANCEL_GRACE) and not isinstance(box[0], BaseException):
            return box[0]
        raise CancelledError("cancelled")
    took = time.monotonic() - started
    return ToolOutcome(
        f"timed out: the run's time ran out after the tool had run {took:.1f} s; it was abandoned, and "
        "anything it did before that may have happened",
        True,
        took,
        timed_out=True,
    )
