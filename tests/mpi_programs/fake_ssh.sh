#!/bin/sh
# A stand-in for ssh, for tests/test_launch_hosts.py: Open MPI's mpiexec runs
# `ssh [options] HOST COMMAND` to start its daemon on each remote host; this
# drops the options and the host and runs COMMAND here, in a clean
# environment as a fresh ssh login would give (HOME and a plain PATH only),
# so that what reaches the ranks comes from mpiexec's -x, as on real hosts.
while [ $# -gt 0 ]; do
    case "$1" in
        -o|-p|-l|-i|-F) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
[ -n "$FAKE_SSH_LOG" ] && echo "$1" >> "$FAKE_SSH_LOG"
shift
exec env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin /bin/sh -c "$*"
