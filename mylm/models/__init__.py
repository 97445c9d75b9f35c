"""What is known about model families (context window, stop strings, reasoning, chat format): `registry`."""
