"""`guard.Corked`: the writes of one turn of the event loop go out as one, in order, and nothing is lost or late."""

from __future__ import annotations

import asyncio
from typing import Any

from mylm.serve.guard import Corked


class Recorder:
    """A transport that records its calls."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(bytes(data))

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


def test_one_turns_writes_are_one_write_in_their_order() -> None:
    async def main() -> list[Any]:
        real = Recorder()
        corked = Corked(real, asyncio.get_running_loop())
        corked.write(b"head ")
        corked.write(b"")
        corked.writelines([b"body ", b"end"])
        assert real.calls == []  # not before the turn ends
        await asyncio.sleep(0)
        corked.write(b"next")
        await asyncio.sleep(0)
        return real.calls

    assert asyncio.run(main()) == [b"head body end", b"next"]


def test_close_sends_what_was_gathered_first_and_abort_drops_it() -> None:
    async def main() -> tuple[list[Any], list[Any]]:
        loop = asyncio.get_running_loop()
        closed, aborted = Recorder(), Recorder()
        one, two = Corked(closed, loop), Corked(aborted, loop)
        one.write(b"last words")
        one.close()
        two.write(b"never")
        two.abort()
        await asyncio.sleep(0)
        one.write(b"after close")  # a closing transport is written nothing more
        await asyncio.sleep(0)
        return closed.calls, aborted.calls

    assert asyncio.run(main()) == ([b"last words", "close"], ["abort"])


def test_a_large_gathering_goes_out_at_once_and_the_rest_is_delegated() -> None:
    async def main() -> list[Any]:
        real = Recorder()
        corked = Corked(real, asyncio.get_running_loop())
        corked.write(b"a" * (Corked.LIMIT - 1))
        corked.write(b"bc")
        sent = list(real.calls)
        assert corked.get_extra_info("peername") == ("127.0.0.1", 1)
        await asyncio.sleep(0)
        return sent + real.calls

    got = asyncio.run(main())
    assert got == [b"a" * (Corked.LIMIT - 1) + b"bc"] * 2
