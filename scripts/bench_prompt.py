"""Benchmark (PRODUCT.md §6 "Prompt economy", "Prefix stability"): tokens mylm adds to every call.

Counts the default system prompt's tokens with `execute_command` and `read_file` (target: under ~450), with
every builtin tool, and the per-turn protocol overhead (a call block, an observation wrapper). Token counts
use OpenAI's cl100k_base and o200k_base vocabularies through `bpe-openai` (`pip install bpe-openai`; it
embeds the vocabularies, no download); without it, counts are estimated at 4 characters per token and say so.
Also checks that every request of a multi-step run is a byte-exact extension of the previous one.

    python scripts/bench_prompt.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mylm import Agent  # noqa: E402
from mylm.prompts import PromptLoader  # noqa: E402
from mylm.protocol.parser import format_tool_call  # noqa: E402
from mylm.testing import ScriptedLLM  # noqa: E402
from mylm.tools import builtin_tools  # noqa: E402
from mylm.core.types import ToolCall  # noqa: E402


def counters() -> dict[str, Callable[[str], int]]:
    """Token counters by name: real vocabularies when bpe-openai is installed, else an estimate."""
    try:
        import bpe_openai
    except ImportError:
        return {"estimate (chars/4)": lambda text: round(len(text) / 4)}
    found: dict[str, Callable[[str], int]] = {}
    for name in ("cl100k_base", "o200k_base"):
        encoding = bpe_openai.get_encoding(name)
        found[name] = lambda text, e=encoding: len(e.encode(text))
    return found


def system_prompt(workspace: Path, names: set[str] | None) -> str:
    tools = [t for t in builtin_tools(workspace=workspace, memory_path=workspace / "memory.db")
             if names is None or t.name in names]
    return Agent(ScriptedLLM([]), tools, workspace=Path("/home/user/project")).system_prompt


def prefix_stable(workspace: Path) -> bool:
    """Run five tool-call iterations and check each request extends the previous one exactly."""
    turns = [format_tool_call(ToolCall("read_file", {"path": f"f{i}.txt"})) for i in range(5)]
    for i in range(5):
        (workspace / f"f{i}.txt").write_text(f"line {i}\n")
    llm = ScriptedLLM([*turns, "done"])
    tools = builtin_tools(workspace=workspace, memory=False)
    Agent(llm, tools, workspace=workspace).run("read them")
    sent = [r.messages for r in llm.requests]
    return len(sent) == 6 and all(later[: len(earlier)] == earlier for earlier, later in zip(sent, sent[1:]))


def main() -> None:
    loader = PromptLoader.default()
    call = "I will read it.\n" + format_tool_call(ToolCall("read_file", {"path": "src/app.py"}))
    observation = loader.render("observation.j2", tool="read_file", output="", cut=0, handle=None)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        rows = {
            "system prompt, execute_command + read_file": system_prompt(workspace, {"execute_command", "read_file"}),
            "system prompt, every builtin tool": system_prompt(workspace, None),
            "a tool call block (canonical form)": call,
            "observation wrapper (empty output)": observation,
        }
        stable = prefix_stable(workspace)
    counting = counters()
    print(f"{'what':<46}" + "".join(f"{name:>22}" for name in counting) + f"{'chars':>8}")
    for label, text in rows.items():
        print(f"{label:<46}" + "".join(f"{count(text):>22}" for count in counting.values()) + f"{len(text):>8}")
    print("target: system prompt with execute_command + read_file under ~450 tokens "
          "(peers per PRODUCT.md: mini-swe-agent ~700, smolagents ~900-2,000)")
    print(f"prefix stability over a 5-step run (each request extends the previous byte for byte): {stable}")


if __name__ == "__main__":
    main()
