"""The tests' helper for programs run on 2 ranks (launched_jobs.run_on_ranks):
a program that fails on a rank fails the test, showing what the ranks wrote."""

import pytest
from launched_jobs import run_on_ranks

PROGRAM = """import os, sys
print("rank", os.environ["OMPI_COMM_WORLD_RANK"], "got", *sys.argv[1:], flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def program(tmp_path):
    """A program that exits with its first argument."""
    path = tmp_path / "exits.py"
    path.write_text(PROGRAM)
    return path


def test_a_program_that_succeeds_passes_its_arguments_as_text(program):
    done = run_on_ranks(program, 0, "--steps", 3, timeout=120)
    assert sorted(done.stdout.splitlines()) == ["rank 0 got 0 --steps 3", "rank 1 got 0 --steps 3"]


def test_a_program_that_fails_fails_the_test_with_its_output(program):
    with pytest.raises(AssertionError, match=r"rank \d got 3"):
        run_on_ranks(program, 3, timeout=120)
    assert run_on_ranks(program, 3, timeout=120, expect_success=False).returncode != 0
