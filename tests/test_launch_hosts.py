"""`towerflow launch` on several hosts (-H host1:2,host2:2, --hostfile):
the mpiexec command line it builds, its usage errors, and real launches on
two "hosts" that are this machine under two names. Open MPI's mpiexec starts
its daemon on each host it takes for remote through ssh; the tests give it
tests/mpi_programs/fake_ssh.sh as ssh (PRTE_MCA_plm_ssh_agent), which runs
the daemon here in a clean environment, so the ranks of 'hostA' and 'hostB'
come from two daemons as on two real hosts (issue 35, item 5)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launched_jobs import JOB_MARK, kill_marked, left_after

from towerflow import launch as launcher

PROGRAMS = Path(__file__).parent / "mpi_programs"
FAKE_SSH = PROGRAMS / "fake_ssh.sh"


# -- the command line ------------------------------------------------------------------

def test_hosts_go_to_mpiexec_with_one_rank_per_slot_by_default():
    line = launcher.mpiexec_command(None, ["python", "t.py"], "mpiexec",
                                    hosts="node1:2,node2:2", env={})
    assert line[:5] == ["mpiexec", "-n", "4", "--host", "node1:2,node2:2"]
    assert "--enable-recovery" in line and line[-2:] == ["python", "t.py"]
    # the slots say how many ranks a host takes: no --oversubscribe, unlike one host
    assert "--oversubscribe" not in line
    assert "--oversubscribe" in launcher.mpiexec_command(2, ["t"], "mpiexec")


def test_a_hostfile_goes_to_mpiexec_and_its_slots_count(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode1 slots=2\n\nnode2 slots=3 max_slots=4  # big\n")
    line = launcher.mpiexec_command(None, ["t"], "mpiexec", hostfile=hostfile, env={})
    assert line[:5] == ["mpiexec", "-n", "5", "--hostfile", str(hostfile)]
    assert launcher.read_hostfile(hostfile) == [("node1", 2), ("node2", 3)]
    assert launcher.mpiexec_command(3, ["t"], "mpiexec", hostfile=hostfile, env={})[:3] == \
        ["mpiexec", "-n", "3"]


def test_a_host_without_slots_has_one_as_in_open_mpi():
    assert launcher.parse_hosts("a:2,b,b") == [("a", 2), ("b", 1), ("b", 1)]
    assert launcher.mpiexec_command(None, ["t"], "mpiexec", hosts="a:2,b,b", env={})[:3] == \
        ["mpiexec", "-n", "4"]


def test_what_ranks_on_other_hosts_need_is_passed_with_x():
    env = {"PATH": "/venv/bin:/usr/bin", "PYTHONPATH": "/src", "TOWERFLOW_STOP_FILE": "/t/s",
           "TOWERFLOW_LAUNCH_JOB": "1-ab", "HOME": "/root", "SSH_AUTH_SOCK": "/s"}
    line = launcher.mpiexec_command(2, ["t"], "mpiexec", hosts="a,b", env=env)
    forwarded = {line[i + 1] for i, word in enumerate(line) if word == "-x"}
    assert forwarded == {"PATH", "PYTHONPATH", "TOWERFLOW_STOP_FILE", "TOWERFLOW_LAUNCH_JOB"}


# -- usage errors: exit 2, one line naming the values -----------------------------------

def run_cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "towerflow", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def one_error_line(done):
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    return lines[0]


def test_more_ranks_than_slots_is_a_usage_error_naming_both():
    line = one_error_line(run_cli("launch", "-n", "6", "-H", "node1:2,node2:2", "true"))
    assert line == ("towerflow: error: launch -n 6 needs 6 slots but -H node1:2,node2:2 "
                    "gives 4: Open MPI starts one rank per slot; give -n 4 or fewer, or "
                    "more slots")


@pytest.mark.parametrize("hosts, bad", [("node1:2,node2:x", "node2:x"), ("node1:0", "node1:0"),
                                        ("node1:2,,node2", "")])
def test_a_bad_host_list_is_a_usage_error(hosts, bad):
    line = one_error_line(run_cli("launch", "-H", hosts, "true"))
    assert line == (f"towerflow: error: launch -H {hosts!r}: expected HOST:SLOTS[,HOST:SLOTS"
                    f"...] with SLOTS a whole number >= 1, got {bad!r}")


def test_a_bad_hostfile_is_a_usage_error(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=two\n")
    line = one_error_line(run_cli("launch", "--hostfile", str(hostfile), "true"))
    assert line == (f"towerflow: error: launch --hostfile {str(hostfile)!r} line 2: expected "
                    "'HOST slots=N' with N a whole number >= 1, got 'node2 slots=two'")
    missing = tmp_path / "absent"
    line = one_error_line(run_cli("launch", "--hostfile", str(missing), "true"))
    assert line == (f"towerflow: error: launch --hostfile {str(missing)!r}: cannot read it "
                    "(No such file or directory)")
    hostfile.write_text("# nothing\n")
    assert one_error_line(run_cli("launch", "--hostfile", str(hostfile), "true")).endswith(
        "names no host")


def test_a_hostfile_without_slots_needs_n(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    line = one_error_line(run_cli("launch", "--hostfile", str(hostfile), "true"))
    assert line == (f"towerflow: error: launch needs -n: --hostfile {hostfile} does not give "
                    "every host's slots (HOST slots=N in the file)")


def test_hosts_and_a_hostfile_together_or_no_n_are_usage_errors(tmp_path):
    line = one_error_line(run_cli("launch", "-H", "a:1", "--hostfile", "f", "true"))
    assert "not allowed with argument" in line
    line = one_error_line(run_cli("launch", "true"))
    assert line == ("towerflow: error: launch needs -n N, how many ranks to start (or "
                    "-H/--hostfile with the slots of each host)")


# -- real launches on two fake hosts -----------------------------------------------------


@pytest.fixture
def two_host_env(tmp_path):
    """The environment for launches whose 'remote' hosts are this machine."""
    pytest.importorskip("mpi4py", reason="multi-process tests need pip install "
                                         "'towerflow[mpi]'")
    if not os.access(FAKE_SSH, os.X_OK) or not Path("/bin/sh").exists():
        pytest.skip("the fake ssh needs /bin/sh and an executable fake_ssh.sh")
    env = dict(os.environ, PRTE_MCA_plm_ssh_agent=str(FAKE_SSH),
               FAKE_SSH_LOG=str(tmp_path / "ssh.log"),
               # NOTE: Open MPI's hierarchical collectives (coll/han) hang when two of its
               # 'nodes' are one machine (seen with 5.0.11); real hosts do not need this
               OMPI_MCA_coll="^han")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(launcher.__file__).parents[1]),
                                                      env.get("PYTHONPATH")]))
    return env


def launch_on(hosts, command, env, *options, timeout=180):
    return subprocess.run([sys.executable, "-m", "towerflow", "launch", "-H", hosts, *options,
                           "--", *command], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)


def train_digits(launch_options, out, env):
    done = subprocess.run([sys.executable, "-m", "towerflow", "launch", *launch_options, "--",
                           sys.executable, "-m", "towerflow", "train", "digits",
                           "--cpu-towers", "1", "--steps", "8", "--quiet", "--json-out",
                           str(out)], capture_output=True, text=True, timeout=180, env=env,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def test_two_hosts_train_digits_as_two_ranks_on_one_host(tmp_path, two_host_env):
    two_hosts = train_digits(["-H", "hostA:1,hostB:1"], tmp_path / "hosts.json", two_host_env)
    # the daemons of both hosts were started through ssh: both hosts were remote
    assert sorted((tmp_path / "ssh.log").read_text().split()) == ["hostA", "hostB"]
    one_host = train_digits(["-n", "2"], tmp_path / "one.json", two_host_env)
    assert two_hosts["world_size"] == one_host["world_size"] == 2
    for key in ("train_accuracy", "test_accuracy"):
        assert two_hosts[key] == one_host[key], key
    # NOTE: MPI may sum the losses of ranks on two nodes in another order than on one
    # node: a float32 rounding apart at most
    for key in ("final_loss", "train_loss"):
        assert two_hosts[key] == pytest.approx(one_host[key], rel=4 * 2.0 ** -23), key


def test_each_host_ranks_count_from_local_rank_0_and_take_that_hosts_gpus(tmp_path,
                                                                          two_host_env):
    env = dict(two_host_env, VIRTUAL_ENV="/probe/venv")
    done = launch_on("hostA:2,hostB:2", [sys.executable, str(PROGRAMS / "local_ranks.py"),
                                         str(tmp_path)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    places = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(4)]
    # Open MPI fills hostA's slots first: ranks 0, 1 there, 2, 3 on hostB
    assert [(p["rank"], p["local_rank"], p["local_size"]) for p in places] == \
        [(0, 0, 2), (1, 1, 2), (2, 0, 2), (3, 1, 2)]
    assert [p["bound_of_two_gpus"] for p in places] == [[0], [1], [0], [1]]
    # the fake ssh starts the daemons with a clean environment: this came through -x
    assert {p["forwarded"] for p in places} == {"/probe/venv"}


def test_a_rank_lost_on_the_second_host_ends_the_job_with_one_line(tmp_path, two_host_env):
    # rank 1 runs on hostB; it stops while MPI starts: the watchdogs there report it
    # through mpiexec's stderr (the launcher cannot read hostB's files)
    mark = str(tmp_path)
    env = dict(two_host_env, **{JOB_MARK: mark})
    started = time.monotonic()
    try:
        done = launch_on("hostA:1,hostB:1", [sys.executable, str(PROGRAMS / "late_start.py"),
                                             str(tmp_path), "--rank-1", "stop"], env,
                         "--timeout", "5", timeout=90)
        seconds, left = time.monotonic() - started, left_after(mark, 5)
    finally:
        kill_marked(mark)
    lines = [line for line in done.stderr.splitlines() if "towerflow" in line]
    assert done.returncode == 1 and len(lines) == 1, done.stdout + done.stderr
    assert re.fullmatch(r"towerflow: error: MPI start-up did not complete within 5 s on rank "
                        r"[01] of 2: rank 1 \(pid \d+\) is stopped "
                        r"\(TOWERFLOW_COLLECTIVE_TIMEOUT sets the limit\)", lines[0]), done.stderr
    assert seconds < 60 and left == [], (seconds, left)


def test_the_ranks_of_other_hosts_die_with_mpiexec(tmp_path, two_host_env):
    # what the launcher's reaper relies on for other hosts, where it cannot look:
    # mpiexec alone, SIGKILLed; each host's daemon then ends its ranks
    mark = str(tmp_path)
    line = launcher.mpiexec_command(2, [sys.executable, str(PROGRAMS / "linger.py"),
                                        str(tmp_path)], hosts="hostA:1,hostB:1",
                                    env={JOB_MARK: mark, "PYTHONPATH": "x"})
    mpiexec = subprocess.Popen(line, env=dict(two_host_env, **{JOB_MARK: mark}),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"started-{rank}").exists() for rank in (0, 1)):
            assert time.monotonic() < deadline and mpiexec.poll() is None, "no start"
            time.sleep(0.1)
        mpiexec.kill()
        mpiexec.wait(timeout=10)
        assert left_after(mark, 10) == [], "a rank outlived mpiexec"
    finally:
        mpiexec.kill()
        kill_marked(mark)


def test_on_several_hosts_the_watchdog_reports_through_stderr_not_a_file(tmp_path):
    from towerflow.parallel import mpi_watchdog
    rank_stuck_in_init = subprocess.Popen(["sleep", "60"])
    try:
        # stdin open: the rank has not finished starting MPI
        watchdog = subprocess.Popen(
            [sys.executable, mpi_watchdog.__file__, str(rank_stuck_in_init.pid), "0.2", "0",
             "2", str(tmp_path), "stream"], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        assert watchdog.wait(timeout=30) == 1
        assert rank_stuck_in_init.wait(timeout=10) == -9     # killed, as stuck in MPI_Init
    finally:
        rank_stuck_in_init.kill()
    assert watchdog.stderr.read() == (
        "towerflow-launch-failure: towerflow: error: MPI start-up did not complete within "
        "0.2 s on rank 0 of 2: rank 1 did not finish starting MPI (no marker on this host: "
        "it may run on another) (TOWERFLOW_COLLECTIVE_TIMEOUT sets the limit)\n")
    assert list(tmp_path.iterdir()) == []   # the launcher cannot read this host's files
