"""The Berkeley Function-Calling Leaderboard's questions and answers, read from the `bfcl-eval` package's data.

mylm reads BFCL's JSON files and never imports or installs the package: `bfcl-eval` pins dozens of heavy
dependencies (exact versions of openai, anthropic, torch-adjacent tooling...) that would fight mylm's own, and
its data and its checker's rules are all a scorer needs (`checker.py` has our version of the rules). The files
are found, in order: under `--bfcl-data` (a directory of `BFCL_v*_*.json` files, a directory holding
`bfcl_eval/data` or a `bfcl_eval-*.whl`, or a wheel file); in an installed `bfcl_eval` (located without
importing it); in the wheel `mylm eval --fetch-bfcl` downloaded into mylm's cache (`pip download --no-deps`,
so none of those dependencies come along). A wheel is read as the zip file it is, never unpacked.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, DownloadError

#: The single-turn categories mylm scores (BFCL's AST categories for Python, and its irrelevance ones).
CATEGORIES = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
)
#: What `--category bfcl` runs.
CORE_CATEGORIES = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
    "live_simple", "live_multiple", "live_irrelevance",
)
PACKAGE = "bfcl-eval"
_FILE = re.compile(r"BFCL_v(\d+)_([a-z_]+)\.json$")


@dataclass(frozen=True)
class Question:
    """One BFCL question: the conversation, the function docs, and the expected calls (None for irrelevance)."""

    id: str
    category: str
    messages: tuple[Mapping[str, Any], ...]
    functions: tuple[Mapping[str, Any], ...]
    answers: tuple[Mapping[str, Mapping[str, Sequence[Any]]], ...] | None


class Source:
    """Where BFCL's data files are: a directory of them, or a wheel (read in place)."""

    def __init__(self, where: Path, members: Mapping[str, str], wheel: Path | None = None) -> None:
        self.where = where
        #: Relative name (`BFCL_v4_simple_python.json`, `possible_answer/...`) -> path in the dir or the zip.
        self.members = dict(members)
        self.wheel = wheel

    def read(self, name: str) -> str:
        location = self.members[name]
        try:
            if self.wheel is not None:
                with zipfile.ZipFile(self.wheel) as archive:
                    return archive.read(location).decode("utf-8")
            return Path(location).read_text(encoding="utf-8")
        except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read BFCL data {name} from {self.where}: {error}") from None

    def file_for(self, category: str, answers: bool = False) -> str | None:
        """The newest BFCL version's file of `category` (its possible answers with `answers`)."""
        best: tuple[int, str] | None = None
        prefix = "possible_answer/" if answers else ""
        for name in self.members:
            if answers != name.startswith("possible_answer/"):
                continue
            found = _FILE.fullmatch(name.removeprefix(prefix))
            if found and found.group(2) == category and (best is None or int(found.group(1)) > best[0]):
                best = (int(found.group(1)), name)
        return best[1] if best else None


def _from_dir(data: Path) -> Source | None:
    members = {p.name: str(p) for p in data.glob("BFCL_v*_*.json")}
    members.update({f"possible_answer/{p.name}": str(p) for p in (data / "possible_answer").glob("BFCL_v*_*.json")})
    return Source(data, members) if members else None


def _from_wheel(wheel: Path) -> Source | None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    members = {n.removeprefix("bfcl_eval/data/"): n for n in names
               if n.startswith("bfcl_eval/data/") and _FILE.search(n)}
    return Source(wheel, members, wheel) if members else None


def source_at(path: Path) -> Source:
    """The BFCL data at `path` (see the module docstring), or a ConfigError saying what was expected there."""
    candidates: list[Source | None] = []
    if path.is_file():
        candidates.append(_from_wheel(path))
    elif path.is_dir():
        candidates += [_from_dir(path), _from_dir(path / "bfcl_eval" / "data"), _from_dir(path / "data")]
        candidates += [_from_wheel(w) for w in sorted(path.glob("bfcl_eval-*.whl"), reverse=True)]
    found = next((c for c in candidates if c is not None), None)
    if found is None:
        raise ConfigError(f"--bfcl-data {path}: no BFCL data there (a directory of BFCL_v*_*.json files, "
                          "one holding bfcl_eval/data or a bfcl_eval-*.whl, or that wheel)")
    return found


def cache_dir() -> Path:
    """Where `--fetch-bfcl` puts the wheel: `bfcl/` in mylm's cache directory."""
    from ..core.paths import cache_dir as mylm_cache

    return mylm_cache() / "bfcl"


def locate(explicit: Path | None = None) -> Source:
    """The BFCL data to use: `explicit`, else an installed `bfcl_eval`, else the wheel in mylm's cache."""
    if explicit is not None:
        return source_at(explicit)
    spec = importlib.util.find_spec("bfcl_eval")  # finds the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec else []:
        found = _from_dir(Path(location) / "data")
        if found is not None:
            return found
    cached = sorted(cache_dir().glob("bfcl_eval-*.whl"), reverse=True)
    for wheel in cached:
        found = _from_wheel(wheel)
        if found is not None:
            return found
    raise ConfigError(
        "no BFCL data found: run with --fetch-bfcl once (pip downloads the bfcl-eval wheel, without its "
        f"dependencies, into {cache_dir()}), or pass --bfcl-data DIR"
    )


def fetch(directory: Path | None = None, *, timeout: float = 300.0) -> Path:
    """Download the `bfcl-eval` wheel, without its dependencies, with the pip of this Python (its index and
    configuration); returns the wheel's path."""
    target = directory or cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
               "--dest", str(target), PACKAGE]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DownloadError(f"cannot run pip to download {PACKAGE}: {error}") from None
    wheels = sorted(target.glob("bfcl_eval-*.whl"), reverse=True)
    if done.returncode != 0 or not wheels:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel was written"]
        raise DownloadError(f"pip could not download {PACKAGE}: {last[0][:300]}")
    return wheels[0]


def load(source: Source, category: str, *, offset: int = 0, limit: int | None = None) -> list[Question]:
    """The questions of `category` from `offset`, at most `limit` of them, each with its possible answers."""
    if category not in CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r} (known: {', '.join(CATEGORIES)})")
    name = source.file_for(category)
    if name is None:
        raise ConfigError(f"the BFCL data in {source.where} has no {category} file")
    rows = _json_lines(source, name)[offset:]
    if limit is not None:
        rows = rows[:limit]
    answers: dict[str, Any] = {}
    if "irrelevance" not in category:
        answer_file = source.file_for(category, answers=True)
        if answer_file is None:
            raise ConfigError(f"the BFCL data in {source.where} has no possible answers for {category}")
        wanted = {row.get("id") for row in rows}
        answers = {a["id"]: a["ground_truth"] for a in _json_lines(source, answer_file) if a.get("id") in wanted}
    questions = []
    for row in rows:
        turns = row.get("question") or [[]]
        truth = answers.get(row["id"])
        if "irrelevance" not in category and truth is None:
            raise ConfigError(f"BFCL question {row['id']} has no possible answer in {source.where}")
        questions.append(Question(
            id=str(row["id"]), category=category, messages=tuple(turns[0]), functions=tuple(row.get("function") or ()),
            answers=tuple(truth) if truth is not None else None,
        ))
    return questions


def _json_lines(source: Source, name: str) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(source.read(name).splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise ConfigError(f"BFCL data {name} in {source.where}, line {number}: not JSON") from None
    return rows


#: BFCL's parameter types as JSON Schema types, as BFCL's own OpenAI handlers convert them.
JSON_TYPES: Mapping[str, str] = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string",
}


def wire_name(name: str) -> str:
    """A function name as OpenAI's API accepts it (`^[a-zA-Z0-9_-]{1,64}$`): BFCL's handlers turn dots into `_`."""
    return name.replace(".", "_")


def json_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """BFCL's parameters doc as JSON Schema: `dict` is an object, `float` a number (said in its description, as
    BFCL's OpenAI handler does), `tuple` an array, `any` and unknown types a string; nested properties and items
    converted the same way."""
    schema: dict[str, Any] = json.loads(json.dumps(dict(parameters)))  # a deep copy that is plain JSON
    schema["type"] = "object"
    schema["properties"] = _properties(schema.get("properties") or {})
    return schema


def _properties(properties: dict[str, Any]) -> dict[str, Any]:
    for value in properties.values():
        if not isinstance(value, dict):
            continue
        _convert(value)
        if value.get("type") in ("array", "object"):
            if isinstance(value.get("properties"), dict):
                value["properties"] = _properties(value["properties"])
            elif isinstance(value.get("items"), dict):
                _convert(value["items"])
                if isinstance(value["items"].get("properties"), dict):
                    value["items"]["properties"] = _properties(value["items"]["properties"])
                if isinstance(value["items"].get("items"), dict):
                    _convert(value["items"]["items"])
    return properties


def _convert(schema: dict[str, Any]) -> None:
    declared = schema.get("type")
    if declared == "float":
        schema["format"] = "float"
        schema["description"] = f"{schema.get('description', '')} This is a float type value.".strip()
    schema["type"] = JSON_TYPES.get(declared, "string") if isinstance(declared, str) else "string"


def tool_docs(question: Question, *, wire: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The question's functions as `{name, description, parameters}` tools (names made wire-safe with `wire`),
    and the map from the names the model sees back to BFCL's names."""
    tools, names = [], {}
    for function in question.functions:
        original = str(function.get("name", ""))
        shown = wire_name(original) if wire else original
        names[shown] = original
        tools.append({"name": shown, "description": str(function.get("description", "")),
                      "parameters": json_schema(function.get("parameters") or {})})
    return tools, names
