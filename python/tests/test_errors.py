"""Errors become Python exceptions with the daemon's message; Ctrl-C and
garbage collection end the stream cleanly."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import batchd
from conftest import python_env


def test_unknown_dataset_names_what_is_served(daemon):
    with pytest.raises(batchd.errors.InvalidArgumentError) as info:
        batchd.Loader(daemon.endpoint, "no-such-set", 4, rank=0, world_size=1)
    assert info.value.code == "INVALID_ARGUMENT"
    assert "unknown dataset 'no-such-set'" in info.value.message
    assert "tiny" in info.value.message
    assert isinstance(info.value, ValueError)


def test_unreachable_daemon(tmp_path):
    with pytest.raises(batchd.errors.UnavailableError) as info:
        batchd.Loader(f"unix:{tmp_path}/nothing", "tiny", 4, rank=0,
                      world_size=1, connect_timeout=0.5)
    assert "could not connect" in info.value.message
    assert isinstance(info.value, ConnectionError)


def test_daemon_killed_mid_epoch_raises_unavailable(fresh_daemon):
    loader = batchd.Loader(fresh_daemon.endpoint, "tiny", 4, size=16,
                           rank=0, world_size=1, prefetch=2,
                           unavailable_timeout=1.0)
    iterator = iter(loader)
    next(iterator)
    fresh_daemon.kill()
    with pytest.raises(batchd.errors.UnavailableError) as info:
        for _ in iterator:
            pass
    assert fresh_daemon.endpoint in info.value.message
    with pytest.raises(batchd.errors.UnavailableError):
        iter(loader)  # the error is sticky
    loader.close()


SCRIPT = textwrap.dedent("""
    import sys, time, batchd
    loader = batchd.Loader(sys.argv[1], "tiny", 4, size=16, rank=0,
                           world_size=1)
    iterator = iter(loader)
    next(iterator)
    print("streaming", flush=True)
    try:
        for epoch in range(1000):
            loader.set_epoch(epoch)
            for _ in loader:
                pass
    except KeyboardInterrupt:
        started = time.monotonic()
        loader.close()
        print("interrupted; closed in %.1f s" % (time.monotonic() - started),
              flush=True)
        sys.exit(3)
""")


def test_ctrl_c_interrupts_a_wait_for_data_and_closes(fresh_daemon):
    child = subprocess.Popen([sys.executable, "-c", SCRIPT,
                              fresh_daemon.endpoint], env=python_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "streaming"
    # A daemon that stops answering: the child waits for data forever.
    os.kill(fresh_daemon.process.pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
    finally:
        os.kill(fresh_daemon.process.pid, signal.SIGCONT)
    assert child.returncode == 3, err
    assert out.startswith("interrupted; closed in"), (out, err)


def test_waiting_for_data_releases_the_gil(fresh_daemon):
    import threading
    loader = batchd.Loader(fresh_daemon.endpoint, "tiny", 4, size=16,
                           rank=0, world_size=1, prefetch=2)
    iterator = iter(loader)
    next(iterator)
    os.kill(fresh_daemon.process.pid, signal.SIGSTOP)
    outcome = []

    def consume():
        try:
            for _ in iterator:
                pass
            outcome.append("finished")
        except batchd.errors.BatchdError as error:
            outcome.append(error.code)

    waiter = threading.Thread(target=consume)
    try:
        waiter.start()
        time.sleep(0.2)  # the waiter is now blocked on the stopped daemon
        assert waiter.is_alive() and not outcome, outcome
        # Pure Python work on this thread runs while the other waits.
        spins = 0
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            spins += 1
        assert spins > 1000
        assert waiter.is_alive()
    finally:
        os.kill(fresh_daemon.process.pid, signal.SIGCONT)
    waiter.join(timeout=20)
    assert outcome == ["finished"]
    loader.close()


def test_close_while_a_fetch_is_blocked_on_a_stopped_daemon(fresh_daemon):
    """close() from another thread cancels a fetch stuck on a daemon that
    stopped answering: it returns, the waiting iteration ends with an error,
    and the C++ loader is destroyed only after its fetch has returned."""
    import threading
    loader = batchd.Loader(fresh_daemon.endpoint, "tiny", 4, size=16,
                           rank=0, world_size=1, prefetch=2)
    iterator = iter(loader)
    next(iterator)
    os.kill(fresh_daemon.process.pid, signal.SIGSTOP)
    outcome = []

    def consume():
        try:
            for _ in iterator:
                pass
            outcome.append("finished")
        except batchd.errors.BatchdError as error:
            outcome.append(error.code)

    closed = []

    def close():
        started = time.monotonic()
        loader.close()
        closed.append(time.monotonic() - started)

    waiter = threading.Thread(target=consume)
    closer = threading.Thread(target=close)
    try:
        waiter.start()
        time.sleep(0.5)  # the waiter is now blocked on the stopped daemon
        closer.start()
        closer.join(timeout=20)
        waiter.join(timeout=20)
        assert not closer.is_alive(), "close() hung"
        assert not waiter.is_alive(), "the waiting iteration hung"
    finally:
        os.kill(fresh_daemon.process.pid, signal.SIGCONT)
    assert len(closed) == 1
    # CANCELLED when the waiter was inside next(), as it is after the sleep
    # above; FAILED_PRECONDITION ("closed") had it not got there yet.
    assert outcome in (["CANCELLED"], ["FAILED_PRECONDITION"]), outcome
    assert loader.live_batches == 0
    with pytest.raises(batchd.errors.FailedPreconditionError):
        iter(loader)
    loader.close()  # idempotent
