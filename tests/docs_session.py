"""Runs one docs page's code blocks in order, for tests/test_docs.py.

    python tests/docs_session.py BLOCKS.json RESULTS.json

BLOCKS.json lists the page's blocks as {"page", "line", "lang", "title", "code"}.
A ``python`` block runs in one namespace shared by the page's python blocks, as a
doctest session does; a ``python`` block with a title (```python title="train.py")
is a program: it is written to that file for a later ``bash`` block to run. A
``bash`` block runs in ``bash -e -o pipefail``. Everything runs in the current
directory, the page's own temporary one.

After each block RESULTS.json gets {line: {"status": "passed" | "failed",
"error": text}}, so a session killed for its time still tells which blocks
passed. The first failure ends the session: later blocks may need its results.
"""

import json
import subprocess
import sys
import traceback

# A shell block runs a few short commands: longer is a block to shrink.
BASH_TIMEOUT_S = 120


def main(blocks_path, results_path):
    with open(blocks_path, encoding="utf-8") as source:
        blocks = json.load(source)
    namespace = {"__name__": "__main__"}
    results = {}
    for block in blocks:
        print(f"===== {block['page']}:{block['line']} ({block['lang']})", flush=True)
        results[block["line"]] = run_block(block, namespace)
        with open(results_path, "w", encoding="utf-8") as out:
            json.dump(results, out)
        if results[block["line"]]["status"] != "passed":
            break


def run_block(block, namespace):
    try:
        if block["title"]:
            _write_program(block)
        elif block["lang"] == "python":
            _run_python(block, namespace)
        else:
            _run_bash(block)
    except Exception:  # noqa: BLE001 - any error is the block's failure, reported
        return {"status": "failed", "error": traceback.format_exc()}
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return {"status": "passed", "error": ""}


def _write_program(block):
    with open(block["title"], "w", encoding="utf-8") as program:
        program.write(block["code"])


def _run_python(block, namespace):
    # Blank lines before the code make a traceback's line numbers the page's.
    padded = "\n" * block["line"] + block["code"]
    exec(compile(padded, f"docs/{block['page']}", "exec"), namespace)  # noqa: S102 - the docs' own code


def _run_bash(block):
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]],
                          timeout=BASH_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the bash block exited with status {done.returncode}")


if __name__ == "__main__":
    main(*sys.argv[1:])
