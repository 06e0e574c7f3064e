"""Every code block of the docs site (docs/**/*.md) and of the README runs, and the site's generated
and listed parts match the code.

- ```python blocks of a page run in order in one namespace; ```bash blocks run in
  bash -e, in the page's temporary directory (tests/docs_session.py runs a page).
  The commands ``towerflow`` and ``python`` there are this interpreter's, and
  ``benchmarks/`` and ``tests/`` are this checkout's, as in a checkout's root.
- ```text blocks are output, shown and not run.
- A page may set environment variables for its session with a comment such as
  ``<!-- docs-test env: TOWERFLOW_SIMULATED_GPUS=1 -->``: the GPU guide's
  examples run on the simulated GPU, as the GPU tests do.
- A block that cannot run in CI (it needs a GPU, say) carries the comment
  ``<!-- not run in CI: the reason -->`` on the line before it; it is reported
  as skipped with that reason. Any other block that cannot run fails here.

Each block is a test named by its page and line (``test_block[guides/towers.md:42]``).
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RUN_LANGS = ("python", "bash")
OUTPUT_LANGS = ("text",)
NOT_RUN = re.compile(r"<!--\s*not run in CI:\s*(.+?)\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})\s*(?P<lang>[\w+-]*)\s*(?P<attrs>.*)$")
TITLE = re.compile(r'title="([^"]+)"')
PAGE_ENV = re.compile(r"^<!--\s*docs-test env:\s*(\w+)=(\S*)\s*-->$", re.MULTILINE)
# Checked out for the page's shell blocks, as its commands say "from the checkout".
CHECKOUT_DIRS = ("benchmarks", "tests")
# A page's blocks together: the docs test must stay within about 3 minutes.
PAGE_TIMEOUT_S = 300
# Blocks not run in CI must stay the exception.
MOST_NOT_RUN = 12


@dataclasses.dataclass(frozen=True)
class Block:
    page: str           # relative to docs/
    line: int           # of the opening fence, 1-based
    lang: str
    title: str
    code: str
    not_run: str        # the reason, when marked not to run in CI

    def __str__(self):
        return f"{self.page}:{self.line}"


def blocks_of(path):
    """The fenced blocks of one Markdown page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = Path(os.path.relpath(path, DOCS)).as_posix()    # ../README.md for the README
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = _closing_fence(lines, index, opening)
        blocks.append(_block(page, lines, index, end, opening))
        index = end + 1
    return blocks


def _closing_fence(lines, start, opening):
    ticks = opening["ticks"]
    for index in range(start + 1, len(lines)):
        if lines[index].strip() == ticks:
            return index
    raise ValueError(f"a code block opened at line {start + 1} is never closed")


def _block(page, lines, start, end, opening):
    indent = len(opening["indent"])
    code = "\n".join(line[indent:] for line in lines[start + 1:end]) + "\n"
    title = TITLE.search(opening["attrs"])
    return Block(page, start + 1, opening["lang"], title[1] if title else "", code,
                 _not_run_reason(lines, start))


def _not_run_reason(lines, start):
    """The reason in a ``not run in CI`` comment on the last non-blank line before."""
    for line in reversed(lines[:start]):
        if line.strip():
            marked = NOT_RUN.search(line)
            return marked[1] if marked else ""
    return ""


def pages():
    """The site's pages, and the README (its quickstart runs too)."""
    return sorted(DOCS.rglob("*.md")) + [REPO / "README.md"]


ALL_BLOCKS = [block for page in pages() for block in blocks_of(page)]
CHECKED_BLOCKS = [block for block in ALL_BLOCKS if block.lang not in OUTPUT_LANGS]


def runnable(block):
    return block.lang in RUN_LANGS and not block.not_run


@pytest.mark.parametrize("block", CHECKED_BLOCKS, ids=str)
def test_block(block, tmp_path_factory):
    if block.not_run:
        pytest.skip(f"docs/{block}: not run in CI: {block.not_run}")
    if block.lang not in RUN_LANGS:
        pytest.fail(f"docs/{block}: a ```{block.lang or '(no language)'} block: write "
                    "```python or ```bash (run here), ```text (output), or mark it "
                    "<!-- not run in CI: why -->")
    results, output = _page_session(block.page, tmp_path_factory)
    result = results.get(str(block.line))
    if result is None:
        pytest.fail(f"docs/{block} did not run: an earlier block of the page failed "
                    f"or the page ran out of time\n{_tail(output)}")
    if result["status"] != "passed":
        pytest.fail(f"docs/{block} failed:\n{result['error']}\n{_tail(output)}")


_SESSIONS = {}


def _page_session(page, tmp_path_factory):
    """({line: result}, the session's output) of the page's runnable blocks, run once."""
    if page not in _SESSIONS:
        directory = tmp_path_factory.mktemp(Path(page).stem)
        blocks = [dataclasses.asdict(block) for block in ALL_BLOCKS
                  if block.page == page and runnable(block)]
        text = (DOCS / page).read_text(encoding="utf-8")
        _SESSIONS[page] = _run_session(blocks, directory, dict(PAGE_ENV.findall(text)))
    return _SESSIONS[page]


def _run_session(blocks, directory, page_env=None):
    """Run ``blocks`` (dicts of Block) in order, as tests/docs_session.py does:
    ({line: result}, the session's stdout and stderr)."""
    (directory / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")
    results_path = directory / "results.json"
    command = [sys.executable, str(REPO / "tests" / "docs_session.py"),
               str(directory / "blocks.json"), str(results_path)]
    env = {**_session_environment(directory), **(page_env or {})}
    try:
        done = subprocess.run(command, cwd=_work_directory(directory), env=env,
                              capture_output=True, text=True, timeout=PAGE_TIMEOUT_S,
                              check=False)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        output = f"(killed after {PAGE_TIMEOUT_S} s) {expired.stdout or ''}"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    return results, output


def _work_directory(directory):
    """Where the blocks run: empty but for the checkout's benchmarks/ and tests/."""
    work = directory / "work"
    work.mkdir()
    for name in CHECKOUT_DIRS:
        (work / name).symlink_to(REPO / name)
    return work


def _session_environment(directory):
    """This interpreter as ``python`` and ``towerflow``; this checkout's towerflow."""
    shims = directory / "bin"
    shims.mkdir()
    for name, command in (("python", ""), ("python3", ""), ("towerflow", "-m towerflow")):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {command} "$@"\n')
        shim.chmod(0o755)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("TOWERFLOW_")}
    env["PATH"] = os.pathsep.join([str(shims), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    return env


def _tail(output, lines=60):
    return "\n".join(output.splitlines()[-lines:])


def test_not_run_blocks_are_few_and_say_why():
    not_run = [block for block in ALL_BLOCKS if block.not_run]
    assert len(not_run) <= MOST_NOT_RUN, [f"{block}: {block.not_run}" for block in not_run]


def test_programs_written_by_a_block_are_run_by_a_later_one():
    """A ```python title="x.py" block is only written to a file: some later block
    of its page must run it, or it would go untested."""
    for block in ALL_BLOCKS:
        if block.title and runnable(block):
            later = [other.code for other in ALL_BLOCKS
                     if other.page == block.page and other.line > block.line]
            assert any(block.title in code for code in later), \
                f"docs/{block}: nothing runs {block.title}"


def test_a_block_that_fails_is_reported_with_its_page_and_line(tmp_path):
    broken = Block("broken.md", 7, "python", "", "1 / 0\n", "")
    after = dataclasses.replace(broken, line=12, code="print('not reached')\n")
    results, _ = _run_session([dataclasses.asdict(broken), dataclasses.asdict(after)],
                              tmp_path)
    assert results["7"]["status"] == "failed"
    assert 'File "docs/broken.md", line 8' in results["7"]["error"]
    assert "12" not in results


def test_every_environment_variable_is_in_the_table():
    table = (DOCS / "environment-variables.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(TOWERFLOW_[A-Z0-9_]+)`", table, re.MULTILINE))
    used = _variables_in_code()
    assert used - documented == set(), "variables the table lacks"
    assert documented - used == set(), "variables the table names that nothing reads"


def _variables_in_code():
    names = set()
    for folder, pattern in (("towerflow", "*.py"), ("benchmarks", "*"), ("tests", "*"),
                            ("ci", "*")):
        for path in (REPO / folder).rglob(pattern):
            if path.is_file() and path.suffix in (".py", ".sh", ""):
                names |= set(re.findall(r"TOWERFLOW_[A-Z0-9_]*[A-Z0-9]",
                                        path.read_text(encoding="utf-8", errors="replace")))
    return names


def test_the_cli_reference_names_every_option():
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    parser = cli_reference.command_parser()
    reference = cli_reference.reference(parser)
    for flag in _flags(parser):
        assert f"`{flag}`" in reference, flag
    for name, _, subparser in cli_reference.subcommands(parser):
        assert f"## towerflow {name}" in reference
        for flag in _flags(subparser):
            assert f"`{flag}`" in reference, (name, flag)
    assert cli_reference.MARKER in (DOCS / "cli.md").read_text(encoding="utf-8")


def _flags(parser):
    """The parser's option strings but -h/--help, which every command has."""
    return [flag for action in parser._actions for flag in action.option_strings
            if flag not in ("-h", "--help")]
