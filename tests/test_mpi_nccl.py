"""all_reduce='nccl' across real MPI ranks (``towerflow launch -n 2``) on the
strict simulated GPUs (TOWERFLOW_SIMULATED_GPUS): each rank binds the GPU of
its local rank, the ranks join one NCCL world through rank 0's unique id, and
two ranks of one GPU tower each train like one device on the global batch."""

from pathlib import Path

import numpy as np
import pytest
from launched_jobs import MPI_MISSING, run_on_ranks, with_simulated_gpus
from test_parallel import batches, relative_difference, train

pytest.importorskip("mpi4py", reason=MPI_MISSING)
PROGRAM = Path(__file__).parent / "mpi_programs" / "train_ranks.py"
BATCH, STEPS = 10, 20
# Two ranks sum their halves of each gradient where one device sums the whole
# batch: a few float32 roundings (eps 2**-23 ~ 1.2e-7) per step, carried by
# momentum through 20 steps: 20 * 4 * 1.2e-7 ~ 1e-5 of the largest parameter.
FLOAT32_REORDERING = 1e-5


def launch_nccl(tmp_path, *args, gpus=2, expect_success=True):
    return run_on_ranks(PROGRAM, tmp_path, "--nccl", "--batch", BATCH, "--steps", STEPS, *args,
                        timeout=120, env=with_simulated_gpus(gpus),
                        expect_success=expect_success)


def rank_results(tmp_path):
    return [np.load(tmp_path / f"rank_{rank}.npz") for rank in (0, 1)]


def parameters(result, count):
    return [result[f"arr_{index}"] for index in range(count)]


@pytest.fixture
def simulated_gpu():
    """One simulated GPU in this process, for the one-device reference (the
    ranks run on simulated GPUs even where a real one is present)."""
    from conftest import release_gpu_backend, use_gpu_backend
    use_gpu_backend(1, simulated=True)
    yield
    release_gpu_backend()


def one_gpu(data):
    """(losses, parameters) of one simulated GPU trained on ``data``."""
    return train(0, BATCH, data=data, device_kind="gpu")


def test_two_ranks_on_their_own_gpus_match_one_device(tmp_path, simulated_gpu):
    launch_nccl(tmp_path)
    reference_losses, reference = one_gpu(batches(BATCH, STEPS))
    ranks = rank_results(tmp_path)
    for rank, result in enumerate(ranks):
        assert relative_difference(parameters(result, len(reference)), reference) \
            <= FLOAT32_REORDERING
        np.testing.assert_allclose(result["losses"], reference_losses, rtol=FLOAT32_REORDERING)
        assert list(result["towers"]) == ["/gpu:0"]
        assert int(result["physical_gpu"]) == rank         # local rank r binds GPU r
        used = result["bytes_used_per_gpu"]
        assert used[rank] > 0 and used[1 - rank] == 0, used   # nothing on the other GPU
    for mine, theirs in zip(parameters(ranks[0], 4), parameters(ranks[1], 4)):
        assert np.array_equal(mine, theirs)                 # replicas bit-identical


def test_gradients_cross_processes_when_ranks_feed_different_batches(tmp_path, simulated_gpu):
    # Rank r feeds the batches of seed r: its shard (half r of its batch) is all
    # it contributes. Only a real all-reduce across processes ends both ranks
    # on the parameters of one device trained on [rank 0's half 0, rank 1's
    # half 1]; a rank training alone ends on its own batches' parameters.
    launch_nccl(tmp_path, "--data-seed-per-rank")
    half = BATCH // 2
    joined = [(np.concatenate([x0[:half], x1[half:]]), np.concatenate([y0[:half], y1[half:]]))
              for (x0, y0), (x1, y1) in zip(batches(BATCH, STEPS, 0), batches(BATCH, STEPS, 1))]
    _, reference = one_gpu(joined)
    _, alone = one_gpu(batches(BATCH, STEPS, 0))
    ranks = rank_results(tmp_path)
    for result in ranks:
        ours = parameters(result, len(reference))
        assert relative_difference(ours, reference) <= FLOAT32_REORDERING
        assert relative_difference(ours, alone) > 100 * FLOAT32_REORDERING
    for mine, theirs in zip(parameters(ranks[0], 4), parameters(ranks[1], 4)):
        assert np.array_equal(mine, theirs)


def test_two_ranks_on_one_gpu_are_refused_with_the_fix(tmp_path):
    done = launch_nccl(tmp_path, gpus=1, expect_success=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "all_reduce='nccl' needs one GPU per rank, but ranks 0 and 1" in output, output
    assert "use all_reduce='mpi'" in output
    assert not (tmp_path / "rank_0.npz").exists()

