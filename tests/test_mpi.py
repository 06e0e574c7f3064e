"""Real MPI ranks (``towerflow launch -n 2``, the Open MPI wheel's mpiexec):
two processes of two logical-CPU towers each train like one device; a dead
rank and disagreeing ranks give named errors instead of hangs."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import MPI_MISSING, run_on_ranks
from test_parallel import relative_difference, train

import towerflow as tf

pytest.importorskip("mpi4py", reason=MPI_MISSING)
PROGRAM = Path(__file__).parent / "mpi_programs" / "train_ranks.py"


@pytest.fixture(autouse=True)
def four_cpus(no_gpu):
    from conftest import split_cpu
    split_cpu(4)


@pytest.mark.parametrize("extra", [[], ["--unseeded-on-rank-1"]], ids=["same-seeds", "broadcast"])
def test_two_ranks_of_two_towers_match_one_device(tmp_path, extra):
    run_on_ranks(PROGRAM, tmp_path, *extra, timeout=120)
    reference_losses, reference = train(0, 10)
    ranks = [np.load(tmp_path / f"rank_{r}.npz") for r in (0, 1)]
    for result in ranks:
        params = [result[f"arr_{i}"] for i in range(len(reference))]
        assert relative_difference(params, reference) <= 1e-5
        np.testing.assert_allclose(result["losses"], reference_losses, rtol=1e-5)
    for i in range(len(reference)):   # ranks end bit-identical
        assert np.array_equal(ranks[0][f"arr_{i}"], ranks[1][f"arr_{i}"])
    assert ranks[1]["devices"][0] == "/job:worker/replica:0/task:1/device:CPU:0"


def test_a_dead_rank_is_named_within_the_timeout(tmp_path):
    # within 60 s, or the launch times out (TimeoutExpired fails the test)
    done = run_on_ranks(PROGRAM, tmp_path, "--die-at", 5, "--timeout", 10, timeout=60,
                        expect_success=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "rank 1 did not join all-reduce" in output, output
    assert not (tmp_path / "rank_0.npz").exists()


def test_ranks_that_disagree_on_shapes_get_the_first_mismatch(tmp_path):
    done = run_on_ranks(PROGRAM, tmp_path, "--hidden-on-rank-1", 9, "--timeout", 10,
                        timeout=120, expect_success=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "tensor 0: rank 0 has shape [5, 8] float32 but rank 1 has shape [5, 9]" in output, \
        output


def test_launch_command_line_has_what_training_needs():
    from towerflow import launch as launcher
    line = launcher.mpiexec_command(3, ["python", "t.py"], mpiexec="mpiexec")
    assert line[:3] == ["mpiexec", "-n", "3"]
    assert "--oversubscribe" in line and "--enable-recovery" in line
    assert line[-2:] == ["python", "t.py"]
    with pytest.raises(ValueError, match="needs a command"):
        launcher.mpiexec_command(2, [])


def test_timeout_without_peers_names_the_missing_rank(monkeypatch):
    from towerflow.parallel import mpi
    from towerflow.parallel.mpi import MpiWorld
    # A real lost peer arms "exit 1 without MPI_Finalize" for this process;
    # here that would turn pytest's own exit status into 1, so record it.
    armed = []
    monkeypatch.setattr(mpi, "_exit_without_finalize", lambda: armed.append(True))

    class SilentPeers:   # a 2-rank world whose other rank never answers
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 2

        def Isend(self, *args, **kwargs):
            return _Done()

        def Irecv(self, *args, **kwargs):
            return _Never()

    with pytest.raises(tf.errors.UnavailableError,
                       match=r"rank 1 did not join all-reduce 'x' within 0.2 s"):
        MpiWorld(SilentPeers()).all_reduce(np.ones(3), "all-reduce 'x'", timeout=0.2)
    assert armed, "a lost peer must arm the exit that skips MPI_Finalize"


class _Done:
    def Test(self):
        return True


class _Never:
    def Test(self):
        return False


@pytest.mark.parametrize("caught", [False, True], ids=["unhandled", "caught"])
def test_a_rank_that_lost_a_peer_exits_with_status_1_without_finalizing(caught):
    # MPI_Finalize waits for every rank, the dead one too: the exit must skip it.
    program = "\n".join([
        "import atexit",
        "from towerflow.parallel import mpi",
        "atexit.register(lambda: print('FINALIZED'))   # stands in for mpi4py's finalize",
        "try:",
        "    raise mpi.MpiWorld._unavailable(type('W', (), {'rank': 0, 'size': 2})(),",
        "                                    [1], 'all-reduce x', 1.0)",
        "except Exception:",
        "    if not " + str(caught) + ":",
        "        raise",
        "print('SCRIPT DONE')",
    ])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert "FINALIZED" not in done.stdout
    assert ("SCRIPT DONE" in done.stdout) == caught
    if not caught:
        assert "rank 1 did not join all-reduce x within 1 s" in done.stderr


def test_stale_mpi_session_directories_are_removed_before_a_launch(tmp_path):
    """A SIGKILLed mpiexec leaves TMPDIR/ompi.<pid>; an mpiexec that later gets
    the same pid failed to start ("The PMIx server's listener thread failed to
    start"): the launcher removes those whose mpiexec is gone, and only those."""
    from towerflow import launch as launcher
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live = tmp_path / f"ompi.{dead.pid}", tmp_path / f"ompi.{os.getpid()}"
    for directory in (stale, live, tmp_path / "ompi.unrelated"):
        (directory / "0").mkdir(parents=True)
    assert launcher.remove_stale_mpi_sessions(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and (tmp_path / "ompi.unrelated").exists()
