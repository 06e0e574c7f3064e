#!/bin/sh
# Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: runs "$@" on
# every rank, with $TOWERFLOW_RANK_1_OPTIONS appended on rank 1 only.
if [ "$OMPI_COMM_WORLD_RANK" = "1" ]; then
    # shellcheck disable=SC2086  # the options are meant to split into words
    exec "$@" $TOWERFLOW_RANK_1_OPTIONS
fi
exec "$@"
