"""The TOWERFLOW_* switches take the values they document and refuse the
others by name, before any work (issue 32, item 7): TOWERFLOW_NATIVE=banana
meant "on", TOWERFLOW_CPU_THREADS=abc/-1/0 were ignored and =100000 failed
inside the first op that split its work."""

import os
import subprocess
import sys

import pytest

import towerflow as tf
from towerflow import switches
from towerflow.backends import native, winograd


@pytest.mark.parametrize("name", switches.ON_OFF)
def test_an_on_off_switch_takes_1_or_0_and_refuses_anything_else_by_name(name):
    for value in ("", "1", "true", "ON", " yes "):
        assert switches.on(name, {name: value}) is True
    for value in ("0", "false", "Off", "no"):
        assert switches.on(name, {name: value}) is False
    assert switches.on(name, {}) is True
    with pytest.raises(ValueError, match=rf"^{name}='banana': expected 1 \(on\) or 0 \(off\)$"):
        switches.on(name, {name: "banana"})


@pytest.mark.parametrize("value", ["abc", "-1", "0", "100000", "1.5", "2 threads"])
def test_cpu_threads_takes_a_whole_number_from_1_to_the_cap(value):
    with pytest.raises(ValueError, match=rf"^TOWERFLOW_CPU_THREADS='{value}': expected a "
                                         rf"whole number of threads from 1 to 1024$"):
        switches.cpu_threads({"TOWERFLOW_CPU_THREADS": value})
    assert switches.cpu_threads({"TOWERFLOW_CPU_THREADS": " 3 "}) == 3
    assert switches.cpu_threads({}) is None


def test_the_modules_read_their_switch_through_it(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "off")
    monkeypatch.setenv("TOWERFLOW_NATIVE", "false")
    assert not winograd.enabled() and not native.available()
    monkeypatch.setenv("TOWERFLOW_NATIVE", "banana")
    with pytest.raises(ValueError, match="TOWERFLOW_NATIVE='banana'"):
        native.available()


def test_a_session_refuses_a_bad_switch_before_any_work(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_CPU_THREADS", "-1")
    with tf.Graph().as_default(), pytest.raises(
            ValueError, match="TOWERFLOW_CPU_THREADS='-1': expected a whole number"):
        tf.Session()


@pytest.mark.parametrize("setting", ["TOWERFLOW_NATIVE=banana", "TOWERFLOW_CPU_THREADS=abc"])
def test_the_command_line_says_so_in_one_line(setting):
    name, value = setting.split("=")
    done = subprocess.run([sys.executable, "-m", "towerflow", "train", "digits", "--epochs", "1"],
                          env={**os.environ, name: value}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"towerflow: error: {name}={value!r}: expected " +
        ("1 (on) or 0 (off)" if name == "TOWERFLOW_NATIVE" else
         "a whole number of threads from 1 to 1024")]
