"""The stop strings mylm asks servers to honour; the parser, not the server, decides where a turn ends."""

from __future__ import annotations

#: The stops mylm sends: the end of a call, and the start of an observation the model must not invent.
TOOL_STOP = "</tool_code>"
OBSERVATION_STOP = "<observation>"
DEFAULT_STOPS = (TOOL_STOP, OBSERVATION_STOP)
