"""Signals a CI runner or `nohup` ignored stay ignored (issue 20, item 7): mylm never takes them back."""

from __future__ import annotations

import signal

from mylm.cli.signals import handling


def test_handling_leaves_an_ignored_signal_ignored() -> None:
    def handler(signum: int, frame: object) -> None:
        raise AssertionError("not to be called")

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a program
    term = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with handling(("SIGHUP", "SIGTERM"), handler):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)
        signal.signal(signal.SIGTERM, term)
