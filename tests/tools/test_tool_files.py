"""The file tools: workspace confinement against real path attacks (both resolvers), paging, writes, edits."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
from pathlib import Path

import pytest

from mylm.core.errors import ToolError
from mylm.tools import ToolContext, run_tool
from mylm.tools.files import MAX_READ_BYTES, edit_text, file_tools, list_entries, read_text, write_text
from mylm.tools.paths import Workspace

CANARY = "OUTSIDE-CANARY-7f3a"
RESOLVERS = ["openat2", "walk", "auto"]


@pytest.fixture
def tree(workspace: Path, outside: Path) -> Path:
    """A workspace seeded with every kind of link a hostile repository could commit."""
    (workspace / "inside.txt").write_text("hello inside\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "inner.txt").write_text("inner\n")
    os.symlink(outside, workspace / "docs")  # absolute link to a directory outside
    os.symlink("../outside", workspace / "rel_out")  # relative link that climbs out
    os.symlink(outside / "secret.txt", workspace / "abs_file")
    os.symlink("../outside/secret.txt", workspace / "rel_file")
    os.symlink("loop", workspace / "loop")
    os.symlink(outside / "new.txt", workspace / "dangling")  # write_file must not create it
    os.link(outside / "secret.txt", workspace / "hard")
    os.symlink("..", workspace / "sub" / "up")  # stays inside: benign
    os.symlink("inside.txt", workspace / "inlink")
    os.symlink(workspace / "inside.txt", workspace / "absin")  # absolute, but inside: benign
    return workspace


def hostile_reads(outside: Path) -> list[str]:
    return [
        "../outside/secret.txt",
        str(outside / "secret.txt"),
        "docs/secret.txt",
        "rel_out/secret.txt",
        "abs_file",
        "rel_file",
        "hard",
        "sub/../../outside/secret.txt",
        "~/../outside/secret.txt",
        "loop",
        "inside.txt\0/../../outside/secret.txt",
        f"/proc/self/root{outside}/secret.txt",
    ]


BENIGN_READS = [
    "inside.txt",
    "./inside.txt",
    "sub/inner.txt",
    "sub/../inside.txt",
    "inlink",
    "absin",
    "sub/up/inside.txt",
]


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_files_hostile_reads_are_refused(tree: Path, outside: Path, resolver: str) -> None:
    ws = Workspace(tree, resolver=resolver)  # type: ignore[arg-type]
    escapes = []
    for path in hostile_reads(outside):
        try:
            text = read_text(ws, path)
        except (ToolError, OSError):
            continue
        if CANARY in text:
            escapes.append(path)
    assert escapes == []


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_files_benign_reads_inside_still_work(tree: Path, resolver: str) -> None:
    ws = Workspace(tree, resolver=resolver)  # type: ignore[arg-type]
    for path in [*BENIGN_READS, str(tree / "inside.txt")]:
        if path == "absin" and resolver == "openat2":
            continue  # the kernel refuses every absolute link under RESOLVE_BENEATH; "auto" then walks it
        assert read_text(ws, path).endswith(("\nhello inside", "\ninner")), path


def test_files_attack_table_is_real(tree: Path, outside: Path) -> None:
    # The same paths opened naively do reach the canary: the refusals above are the defence at work.
    naive = 0
    for path in hostile_reads(outside):
        if "\0" in path or path.startswith("~"):
            continue
        try:
            naive += CANARY in (tree / path).read_text()
        except OSError:
            pass
    assert naive >= 8


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_files_hostile_writes_are_refused(tree: Path, outside: Path, resolver: str) -> None:
    ws = Workspace(tree, resolver=resolver)  # type: ignore[arg-type]
    before = sorted(p.name for p in outside.iterdir())
    for path in [
        "../outside/victim.txt",
        str(outside / "victim.txt"),
        "docs/victim.txt",
        "dangling",
        "hard",
        "rel_out/new.txt",
        "abs_file",
        "docs/deeper/new.txt",
    ]:
        with pytest.raises(ToolError):
            write_text(ws, path, "PWNED")
        with pytest.raises(ToolError):
            edit_text(ws, path, CANARY, "PWNED")
    assert sorted(p.name for p in outside.iterdir()) == before
    assert {p.read_text() for p in outside.iterdir()} == {CANARY}


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_files_benign_writes_inside_still_work(tree: Path, resolver: str) -> None:
    ws = Workspace(tree, resolver=resolver)  # type: ignore[arg-type]
    write_text(ws, "new.txt", "a\n")
    write_text(ws, "deep/er/new.txt", "b\n")
    write_text(ws, str(tree / "abs.txt"), "c\n")
    write_text(ws, "sub/up/via_up.txt", "d\n")
    assert [(tree / p).read_text() for p in ("new.txt", "deep/er/new.txt", "abs.txt", "via_up.txt")] == [
        "a\n",
        "b\n",
        "c\n",
        "d\n",
    ]


def _exchange(a: Path, b: Path) -> None:
    """Swap two directory entries atomically (renameat2 RENAME_EXCHANGE), so `a` never goes missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_files_symlink_swapped_in_during_the_call_never_leaks(
    tree: Path, outside: Path, resolver: str
) -> None:
    ws = Workspace(tree, resolver=resolver)  # type: ignore[arg-type]
    (tree / "flip").mkdir()
    (tree / "flip" / "file.txt").write_text("inside\n")
    os.symlink(outside, tree / "flip.link")
    (outside / "file.txt").write_text(CANARY)
    stop = threading.Event()

    def flip() -> None:  # `flip` is a real directory, then a link to the outside, and back, endlessly
        while not stop.is_set():
            _exchange(tree / "flip", tree / "flip.link")

    flipper = threading.Thread(target=flip)
    flipper.start()
    leaks = reads = refusals = 0
    try:
        for i in range(1500):
            try:
                leaks += CANARY in read_text(ws, "flip/file.txt")
                reads += 1
            except (ToolError, OSError):
                refusals += 1
            try:
                write_text(ws, f"flip/w{i % 7}.txt", "x")
            except (ToolError, OSError):
                refusals += 1
    finally:
        stop.set()
        flipper.join()
    assert leaks == 0
    assert not list(outside.glob("w*.txt"))
    assert reads > 0 and refusals > 0  # the race really alternated between the two


def test_files_read_pages_through_a_file(workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ws = Workspace(workspace)
    assert read_text(ws, "f.txt", 1, 3) == (
        "[f.txt: lines 1-3 of 10]\nline 1\nline 2\nline 3\n"
        "[more lines follow; call read_file with offset=4 to continue]"
    )
    assert read_text(ws, "f.txt", 9, 5) == "[f.txt: lines 9-10 of 10]\nline 9\nline 10"
    with pytest.raises(ToolError, match="offset 11 is past the end of f.txt: it has 10 lines"):
        read_text(ws, "f.txt", 11)


def test_files_read_caps_bytes_per_call(workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"{i:09d}\n" for i in range(100_000)))  # 1 MB
    text = read_text(Workspace(workspace), "big.txt")
    assert len(text.encode()) < MAX_READ_BYTES + 200
    assert text.startswith("[big.txt: lines 1-2000 of 100,000]")
    assert text.endswith("call read_file with offset=2001 to continue]")


def test_files_read_cuts_an_endless_line(workspace: Path) -> None:
    (workspace / "min.js").write_text("x" * (3 * MAX_READ_BYTES))
    text = read_text(Workspace(workspace), "min.js")
    assert len(text) < MAX_READ_BYTES + 300 and "is longer than 256 KiB and was cut" in text


def test_files_binary_and_huge_sparse_files_are_described(workspace: Path) -> None:
    (workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    with open(workspace / "sparse.bin", "wb") as f:
        f.truncate(10 * 2**30)  # 10 GB of holes: must be described, not read
    with open(workspace / "sparse.log", "wb") as f:
        f.write(b"".join(b"log line %d\n" % i for i in range(1000)))
        f.truncate(10 * 2**30)
    ws = Workspace(workspace)
    assert "binary file (PNG image, 108 bytes)" in read_text(ws, "img.png")
    assert "binary file (binary data, 10,737,418,240 bytes)" in read_text(ws, "sparse.bin")
    text = read_text(ws, "sparse.log")
    assert text.startswith("[sparse.log: lines 1-") and len(text) < MAX_READ_BYTES + 300


def test_files_read_scrubs_known_secret_values(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYLM_API_KEY", "sk-test-CANARY-0123456789abcdef")
    (workspace / "config.py").write_text('KEY = "sk-test-CANARY-0123456789abcdef"\n')
    assert read_text(Workspace(workspace), "config.py").endswith('KEY = "[REDACTED]"')


def test_files_special_files_are_refused(workspace: Path) -> None:
    os.mkfifo(workspace / "fifo")  # opening it for reading must not wait for a writer
    ws = Workspace(workspace)
    with pytest.raises(ToolError, match="not a regular file"):
        read_text(ws, "fifo")
    with pytest.raises(ToolError, match="is a directory; use list_dir"):
        read_text(ws, ".")


def test_files_write_is_atomic_and_keeps_the_mode(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    ws = Workspace(workspace)
    assert (
        write_text(ws, "run.sh", "new\n")
        == "Wrote 4 bytes (1 line) to run.sh (replaced its previous content)."
    )
    assert script.read_text() == "new\n" and stat.S_IMODE(script.stat().st_mode) == 0o755
    assert sorted(p.name for p in workspace.iterdir()) == ["run.sh"]  # no temp file left behind
    with pytest.raises(ToolError, match="names a directory"):
        write_text(ws, "dir/", "x")
    with pytest.raises(ToolError, match="accepts at most"):
        write_text(ws, "huge.txt", "x" * (11 * 2**20))


def test_files_edit_replaces_exactly_one_occurrence(workspace: Path) -> None:
    (workspace / "a.py").write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    ws = Workspace(workspace)
    with pytest.raises(ToolError, match=r"occurs 2 times in a.py \(at lines 2, 5\)"):
        edit_text(ws, "a.py", "return 1", "return 2")
    assert edit_text(ws, "a.py", "def g():\n    return 1", "def g():\n    return 2") == (
        "Edited a.py: replaced 2 lines at line 4 with 2 lines."
    )
    assert (workspace / "a.py").read_text().endswith("return 2\n")
    with pytest.raises(ToolError, match="differing only in whitespace is at line 1"):
        edit_text(ws, "a.py", "def f():\n  return 1", "x")
    with pytest.raises(ToolError, match="was not found"):
        edit_text(ws, "a.py", "nothing like it", "x")
    with pytest.raises(ToolError, match="identical"):
        edit_text(ws, "a.py", "f", "f")
    with pytest.raises(ToolError, match="does not exist; create it with write_file"):
        edit_text(ws, "missing.py", "a", "b")


def test_files_edit_keeps_crlf_line_endings(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    note = edit_text(Workspace(workspace), "w.txt", "one\ntwo", "1\n2")
    assert "CRLF" in note and (workspace / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_files_list_dir_shows_kinds_sizes_and_links(tree: Path) -> None:
    text = list_entries(Workspace(tree), ".")
    lines = text.splitlines()
    assert lines[0].startswith("[.: 11 entries: ") and lines[0].endswith(", 1 directory]")
    assert lines[1] == "sub/" and "inside.txt  (13 bytes)" in lines
    assert "docs -> " + str(tree.parent / "outside") in lines  # shown, not followed
    with pytest.raises(ToolError):
        list_entries(Workspace(tree), "docs")
    with pytest.raises(ToolError, match="is a file, not a directory"):
        list_entries(Workspace(tree), "inside.txt")


def test_files_tools_turn_failures_into_error_observations(workspace: Path) -> None:
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    context = ToolContext(workspace=workspace)
    missing = run_tool(tools["read_file"], {"path": "nope.txt"}, context)
    assert missing.is_error and missing.output == "'nope.txt' does not exist; the workspace is empty"
    escape = run_tool(tools["read_file"], {"path": "../x"}, context)
    assert escape.is_error and "leads outside the workspace" in escape.output
    assert tools["read_file"].validate({"path": "a", "offset": 0})[1] == [
        "argument 'offset' must be >= 1, got 0"
    ]
    assert tools["write_file"].validate({"path": "a"})[1] == [
        "missing required argument 'content' (The complete new content of the file.)"
    ]


@pytest.mark.parametrize("path", ["", " ", "\t\n", ".", "./", ".//", "./.", " ./ ", "sub/..", "sub/../."])
def test_files_empty_and_dot_like_paths_name_the_workspace(tree: Path, path: str) -> None:
    # Issue 20: a small model listing "" to look around was refused, and looped on it.
    tools = {t.name: t for t in file_tools(Workspace(tree))}
    listed = run_tool(tools["list_dir"], {"path": path}, ToolContext(workspace=tree))
    assert not listed.is_error and listed.output == list_entries(Workspace(tree), ".")
    assert Workspace(tree).relative(path) == "."
    read = run_tool(tools["read_file"], {"path": path}, ToolContext(workspace=tree))
    assert read.is_error and read.output.endswith("is a directory; use list_dir to see what it contains")


def test_files_counts_say_one_line_not_one_lines(workspace: Path) -> None:
    # Issue 20: "1 lines", "1 more lines", "1 directories".
    from mylm.cli.display import summarise_output

    ws = Workspace(workspace)
    assert write_text(ws, "one.txt", "x\n") == "Wrote 2 bytes (1 line) to one.txt (new file)."
    assert write_text(ws, "b.txt", "a\nb\n") == "Wrote 4 bytes (2 lines) to b.txt (new file)."
    assert edit_text(ws, "one.txt", "x", "y").startswith("Edited one.txt: replaced 1 line at line 1 with 1 line.")
    (workspace / "sub").mkdir()
    assert list_entries(ws, ".").splitlines()[0] == "[.: 3 entries: 2 .txt files, 1 directory]"
    assert list_entries(ws, "sub") == "[sub is empty]"
    (workspace / "sub" / "only").write_text("")
    assert list_entries(ws, "sub").splitlines()[0] == "[sub: 1 entry: 1 file with no extension, 0 directories]"
    assert summarise_output("\n".join(map(str, range(7))), lines=6).endswith("… 1 more line (-v shows all)")


# Qwen2.5-Coder-1.5B (temperature 0, the agent-task suite) guessed `src/parse_header.py` for a function defined in
# src/util.py, was told only that it does not exist, and wrote the file itself. A missing path is answered with
# what the nearest existing directory holds.
def test_a_missing_path_is_answered_with_what_the_nearest_directory_holds(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "util.py").write_text("def parse_header(h):\n    return h\n")
    (workspace / "src" / "main.py").write_text("")
    (workspace / "notes.txt").write_text("x")
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    context = ToolContext(workspace=workspace)
    guessed = run_tool(tools["read_file"], {"path": "src/parse_header.py"}, context)
    assert guessed.output == "'src/parse_header.py' does not exist; src/ holds: main.py, util.py"
    deeper = run_tool(tools["read_file"], {"path": "lib/x/y.py"}, context)
    assert deeper.output == "'lib/x/y.py' does not exist; the workspace holds: src/, notes.txt"
    listed = run_tool(tools["list_dir"], {"path": "src/parsers"}, context)
    assert listed.is_error and listed.output.endswith("src/ holds: main.py, util.py")


def test_a_missing_path_hint_never_shows_a_secret_directory_to_an_unapproved_read(workspace: Path) -> None:
    (workspace / ".ssh").mkdir()
    (workspace / ".ssh" / "id_rsa").write_text("KEY")
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    unapproved = ToolContext(workspace=workspace, grant="read-only")
    missing = run_tool(tools["read_file"], {"path": ".ssh/id_ed25519"}, unapproved)
    assert missing.is_error and "id_rsa" not in missing.output


# The same run: asked which port config.json sets, the model tried `edit_file` with old `port: 5433` (the file
# says `"port": 5433`) three times, each time told only that `old` was not found.
def test_an_edit_whose_old_text_is_missing_names_the_line_most_like_it(workspace: Path) -> None:
    (workspace / "config.json").write_text(
        '{\n  "app": {"name": "shop", "port": 8080},\n  "database": {"host": "db.internal", "port": 5433}\n}\n'
    )
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    context = ToolContext(workspace=workspace)
    miss = run_tool(tools["edit_file"], {"path": "config.json", "old": "port: 5433", "new": "port: 5434"}, context)
    assert miss.is_error and miss.output.endswith(
        'The line most like it is line 3:\n  "database": {"host": "db.internal", "port": 5433}'
    )
    unlike = run_tool(tools["edit_file"], {"path": "config.json", "old": "zzzz qqqq", "new": "p"}, context)
    assert unlike.is_error and "most like" not in unlike.output


# And asked to rename `cnt` to `count` in app.py, it called edit_file with old `cnt` twice: three occurrences.
def test_replace_all_renames_every_occurrence_and_says_where(workspace: Path) -> None:
    (workspace / "app.py").write_text("cnt = 0\nfor w in 'a b c'.split():\n    cnt += 1\nprint('words:', cnt)\n")
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    context = ToolContext(workspace=workspace)
    once = run_tool(tools["edit_file"], {"path": "app.py", "old": "cnt", "new": "count"}, context)
    assert once.is_error and "set replace_all to true" in once.output
    every = run_tool(tools["edit_file"], {"path": "app.py", "old": "cnt", "new": "count", "replace_all": True}, context)
    assert every.output == "Edited app.py: replaced 3 occurrences (at lines 1, 3, 4)."
    assert "cnt" not in (workspace / "app.py").read_text()
    single = run_tool(tools["edit_file"], {"path": "app.py", "old": "words", "new": "n", "replace_all": True}, context)
    assert single.output == "Edited app.py: replaced 1 line at line 4 with 1 line."


# Asked to add 'buy milk' at the end of todo.txt, it tried edit_file with an empty `old`, was pointed at
# write_file, and replaced the whole file with the one line.
def test_an_edit_with_an_empty_old_says_how_to_append_with_the_file_s_real_last_line(workspace: Path) -> None:
    (workspace / "todo.txt").write_text("call mom\nfeed cat\n\n")
    tools = {t.name: t for t in file_tools(Workspace(workspace))}
    context = ToolContext(workspace=workspace)
    told = run_tool(tools["edit_file"], {"path": "todo.txt", "old": "", "new": "buy milk\n"}, context)
    assert told.is_error and told.output.endswith(
        'call edit_file with these arguments: {"path": "todo.txt", "old": "feed cat", "new": "feed cat\\nbuy milk"}')
    assert (workspace / "todo.txt").read_text() == "call mom\nfeed cat\n\n"
    followed = run_tool(tools["edit_file"], {"path": "todo.txt", "old": "feed cat", "new": "feed cat\nbuy milk"},
                        context)
    assert not followed.is_error and (workspace / "todo.txt").read_text() == "call mom\nfeed cat\nbuy milk\n\n"


def test_files_a_listing_counts_its_files_by_extension(workspace: Path) -> None:
    # Asked how many Python files a directory holds, Qwen2.5-Coder-1.5B answered 3 from a listing of 2 (the quick
    # start, 29 November): the listing counts for it, with no total of files (given "4 files: 2 .py", it said 4).
    for name in ("app.py", "util.py", "README.md", "data.csv", "Makefile", "b.PY"):
        (workspace / name).write_text("x\n")
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "core.py").write_text("x\n")
    header = list_entries(Workspace(workspace), ".").splitlines()[0]
    assert header == "[.: 7 entries: 3 .py files, 1 .csv file, 1 .md file, 1 file with no extension, 1 directory]"
    for n in range(9):
        (workspace / f"f.e{n}").write_text("")
    assert list_entries(Workspace(workspace), ".").splitlines()[0].endswith(
        "3 .py files, 1 .csv file, 1 .e0 file, 1 .e1 file, 1 .e2 file, 1 .e3 file, 7 other files, 1 directory]")
