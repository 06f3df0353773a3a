"""The run lock (pipeline/local/run_lock.py) is its holder's alone: a fork of the holder (the
run's worker lane) does not keep it held once the holder has ended."""

import os
import signal
import time

from pipeline.local import run_lock


def test_a_fork_of_the_holder_does_not_keep_the_lock(tmp_path):
    path = str(tmp_path / "run.lock")
    read, write = os.pipe()
    started_read, started_write = os.pipe()
    holder = os.fork()
    if holder == 0:  # the run: holds the lock, forks its worker, ends at once (os._exit)
        with run_lock.hold(path):
            worker = os.fork()
            if worker == 0:  # the worker (its fork handlers have run): alive after its parent
                os.write(started_write, b"started")
                time.sleep(30)
                os._exit(0)
            os.read(started_read, 16)
            os.write(write, str(worker).encode())
            os._exit(4)
    os.close(write)
    worker = int(os.read(read, 32))
    try:
        assert os.waitpid(holder, 0)[1] >> 8 == 4
        os.kill(worker, 0)  # still running
        with run_lock.hold(path):  # and the lock is free
            pass
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_second_run_is_refused_naming_the_holder(tmp_path):
    path = str(tmp_path / "run.lock")
    with run_lock.hold(path):
        pid = os.fork()
        if pid == 0:
            try:
                with run_lock.hold(path):
                    os._exit(0)
            except run_lock.Locked as err:
                os._exit(3 if f"holds {path}: pid {os.getppid()} on" in str(err) else 1)
        assert os.waitpid(pid, 0)[1] >> 8 == 3
