"""The text protocol: its tags, the tolerant parser, the canonical form, corrections and stop strings."""
