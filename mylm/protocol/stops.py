"""Stop strings: the ones mylm sends, and a cutter for text that must end at a stop whatever the server did."""

from __future__ import annotations

from collections.abc import Sequence

from .tags import DEFAULT_STOPS, OBSERVATION_OPEN, TOOL_CLOSE

#: The stops mylm sends: the end of a call, and the start of an observation the model must not invent.
TOOL_STOP = TOOL_CLOSE
OBSERVATION_STOP = OBSERVATION_OPEN
__all__ = ["DEFAULT_STOPS", "OBSERVATION_STOP", "TOOL_STOP", "StopCutter"]


class StopCutter:
    """Passes text through until the first stop string (cut before it), holding back a possible partial stop.

    Raw-prompt providers run their chat format's end-of-turn markers (`<|im_end|>`, ...) through it: servers
    differ on whether they honour, include or ignore such stops, and this makes them all look the same. (The
    protocol's own stops are decided by the parser, which knows where a block really ends.)
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
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
            return window[:first]
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
