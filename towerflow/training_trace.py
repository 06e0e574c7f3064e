"""``towerflow train RECIPE --trace FILE [--trace-steps N]``: N training steps
(default 3), from the second of the run (the first compiles its plans),
traced and written as one Chrome trace (see towerflow/client/timeline.py).

Under ``towerflow launch -n R`` every rank traces the same steps; rank 0
gathers the ranks' step stats over MPI and writes one file with a row group
per rank (process names prefixed ``rank R``, as Horovod's timeline does),
each rank's times shifted so that the ranks agree on the moment they left a
common barrier just before the first traced step::

    traces = StepTraces("t.json", steps=3, first_step=0, strategy=strategy)
    sess.run(fetches, feed_dict=feed, **traces.run_options(step))
    ...
    traces.finish()
"""

import statistics
import time

from .client import timeline
from .step_stats import RunMetadata, RunOptions

DEFAULT_TRACE_STEPS = 3


class StepTraces:
    """The traced steps of one run; ``path`` None: traces nothing."""

    def __init__(self, path, steps, first_step, strategy):
        self._path = path
        steps = DEFAULT_TRACE_STEPS if steps is None else steps
        # Steps done before a traced run: the run's second step onwards.
        self._traced = range(first_step + 1, first_step + 1 + steps) if path else range(0)
        self._strategy = strategy
        self._runs = []               # timeline.TracedRun of each traced step
        self._metadata = None         # the traced step in progress: (step, RunMetadata)
        self._barrier_micros = None   # this rank's clock leaving each of the barriers

    def run_options(self, steps_done):
        """``Session.run`` keywords for the step after ``steps_done`` steps:
        tracing ones for a traced step, else none."""
        if self._metadata is not None:      # the last traced run's stats, kept
            step, metadata = self._metadata
            self._runs.append(timeline.TracedRun(metadata.step_stats, step,
                                                 self._strategy.rank))
            self._metadata = None
        if steps_done not in self._traced:
            return {}
        if self._barrier_micros is None:
            self._barrier_micros = self._leave_barrier()
        self._metadata = (steps_done, RunMetadata())
        return {"options": RunOptions(trace_level=RunOptions.FULL_TRACE),
                "run_metadata": self._metadata[1]}

    def finish(self):
        """Write the trace file (rank 0; every rank must call this). Returns the
        number of traced steps."""
        if not self._path:
            return 0
        self.run_options(-1)
        traced = self._steps_traced()
        runs = self._runs
        if self._strategy.num_ranks > 1:
            runs = self._gathered()
        if self._strategy.rank == 0:
            trace = timeline.Timeline.of_runs(runs).generate_chrome_trace_format()
            with open(self._path, "w") as out:
                out.write(trace)
        return traced

    def _steps_traced(self):
        if not any(run.step_stats.dev_stats for run in self._runs):
            return 0
        return len(self._traced)

    def _leave_barrier(self):
        """This rank's clock (µs) as it leaves each of CLOCK_BARRIERS barriers all
        ranks join."""
        if self._strategy.num_ranks == 1:
            return [time.time_ns() // 1000]
        exits = []
        for _ in range(CLOCK_BARRIERS):
            self._world().all_gather(None, "the trace's clock barrier", self._strategy.timeout)
            exits.append(time.time_ns() // 1000)
        return exits

    def _gathered(self):
        """Every rank's traced runs: devices prefixed with the rank, times on
        rank 0's clock (as at the barrier)."""
        mine = (self._runs, self._barrier_micros or [0])
        everyone = self._world().all_gather(mine, "the trace's step stats",
                                            self._strategy.timeout)
        reference = everyone[0][1]
        gathered = []
        for rank, (runs, exits) in enumerate(everyone):
            shift = _clock_shift(reference, exits)
            for run in runs:
                for dev_stats in run.step_stats.dev_stats:
                    dev_stats.device = f"rank {rank} {dev_stats.device}"
                    for node in dev_stats.node_stats:
                        node.all_start_micros += shift
                        node.scheduled_micros += shift
            gathered.extend(runs)
        return gathered

    @staticmethod
    def _world():
        from .parallel import mpi
        return mpi.world()


# Barriers whose exit times align the ranks' clocks. NOTE: one was not enough
# on a busy 2-core machine: a rank descheduled for a few ms after leaving it
# put its ops that far off rank 0's; the median over several is robust to that.
CLOCK_BARRIERS = 9


def _clock_shift(reference, exits):
    """µs to add to a rank's times to put them on rank 0's clock: the median of
    the differences of the two ranks' exit times from the same barriers."""
    return int(statistics.median(ref - mine for ref, mine in zip(reference, exits)))
