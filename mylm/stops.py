"""Stop strings: the ones mylm sends, and a cutter for text that must end at a stop whatever the server did."""

from __future__ import annotations

from typing import Collection, Sequence

#: The stops mylm sends: the end of a call, and the start of an observation the model must not invent.
TOOL_STOP = "</tool_code>"
OBSERVATION_STOP = "<observation>"
DEFAULT_STOPS = (TOOL_STOP, OBSERVATION_STOP)


class StopCutter:
    """Passes text through until the first stop string, holding back anything that may be a partial stop.

    Servers differ: most drop the stop string, some include it, some ignore stops. Running every completion
    through this makes them all look the same. A stop listed in `keep` is kept in the output (the closing
    `</tool_code>` belongs to the block); the others are cut before.
    """

    def __init__(self, stops: Sequence[str], *, keep: Collection[str] = (TOOL_STOP,)) -> None:
        self._stops = tuple(s for s in stops if s)
        self._keep = frozenset(keep)
        self._held = ""
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        #: The stop string that ended the text, once one has.
        self.hit: str | None = None

    def feed(self, text: str) -> str:
        """Add streamed text; return the part that is safe to pass on (empty once a stop has been hit)."""
        if self.hit is not None:
            return ""
        window = self._held + text
        first, which = -1, ""
        for stop in self._stops:
            i = window.find(stop)
            if i >= 0 and (first < 0 or i < first):
                first, which = i, stop
        if first >= 0:
            self.hit, self._held = which, ""
            return window[: first + len(which)] if which in self._keep else window[:first]
        keep = self._partial_stop_suffix(window)
        self._held = window[len(window) - keep :] if keep else ""
        return window[: len(window) - keep]

    def flush(self) -> str:
        """End of stream: return what was held back, minus a half-written stop at the very end."""
        held, self._held = self._held, ""
        # A lone "<" is more likely text than a stop that was cut off after one character.
        if self.hit is None and len(held) >= 2 and self._partial_stop_suffix(held) == len(held):
            return ""
        return held

    def _partial_stop_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if stop.startswith(text[-n:]):
                    best = n
                    break
        return best
