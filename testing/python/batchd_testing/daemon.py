"""The one way Python code starts a batchd daemon: the Python tests
(python/tests/conftest.py), the benchmarks (bench/*.py) and the examples.
Its shell twin is testing/shell/batchd_daemon.sh.

    from batchd_testing.daemon import Daemon, daemon_binary
    with Daemon(daemon_binary("build"), {"bench": data}, ["--workers", "1"],
                cores="0") as d:
        run_client(d.endpoint)          # "127.0.0.1:PORT"
        run_client(d.unix_endpoint)     # "unix:PATH", with unix_socket=True
        cpu = proc_cpu_seconds(d.pid)
        page = d.metrics()              # with metrics=True

The daemon listens on a free loopback port (--port 0 and a port file), and
with unix_socket=True also on a Unix socket in its directory; with
metrics=True it serves /metrics on another free port. With `cores` it is
pinned with taskset (when taskset exists). Its stdout and stderr go to
`log_path`; `log()` reads them. The constructor returns once the daemon
serves, or raises RuntimeError with its log if it exits or does not write
its port within `start_timeout_s`.

`directory` keeps the daemon's files (port files, socket, log) where the
caller wants them, e.g. a pytest tmp_path; without it they go to a
temporary directory that stop() removes (log() still answers afterwards).
stop() (also on leaving the `with` block) sends SIGCONT, in case a test
stopped the daemon, then SIGTERM, and waits for the drain; SIGKILL after
`stop_timeout_s`. Not thread-safe: one thread owns a Daemon.
"""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request


def daemon_binary(build):
    """The daemon of a CMake build tree: BUILD/server/batchd."""
    return os.path.join(os.fspath(build), "server", "batchd")


class Daemon:
    """A batchd process on a free loopback port; see the module comment."""

    def __init__(self, binary, datasets, flags=(), *, directory=None,
                 cores=None, metrics=False, unix_socket=False,
                 start_timeout_s=30.0, stop_timeout_s=20.0):
        """Starts `binary` serving `datasets` ({name: path}) with `flags`
        (more daemon flags, e.g. ["--workers", "2"]) and waits until it
        serves."""
        self._stop_timeout_s = stop_timeout_s
        self._temporary = directory is None
        if self._temporary:
            directory = tempfile.mkdtemp(prefix="batchd-daemon-")
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        port_file = self.directory / "port"
        metrics_file = self.directory / "metrics-port"
        for stale in (port_file, metrics_file):
            stale.unlink(missing_ok=True)
        args = [os.fspath(binary), "--host", "127.0.0.1", "--port", "0",
                "--port-file", str(port_file)]
        for name, path in datasets.items():
            args += ["--dataset", f"{name}={path}"]
        if metrics:
            args += ["--metrics-port", "0", "--metrics-port-file",
                     str(metrics_file)]
        self.unix_endpoint = None
        if unix_socket:
            socket_path = self.directory / "batchd.sock"
            self.unix_endpoint = f"unix:{socket_path}"
            args += ["--unix-socket", str(socket_path)]
        args += [str(flag) for flag in flags]
        if cores is not None and shutil.which("taskset"):
            args = ["taskset", "-c", str(cores)] + args
        self.log_path = self.directory / "batchd.log"
        self._log_text = ""
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self._log,
                                        stderr=subprocess.STDOUT)
        self.pid = self.process.pid
        try:
            deadline = time.monotonic() + start_timeout_s
            self.port = int(self._wait_for(port_file, deadline))
            self.endpoint = f"127.0.0.1:{self.port}"
            self.metrics_port = (int(self._wait_for(metrics_file, deadline))
                                 if metrics else None)
        except BaseException:
            self.stop()
            raise

    def _wait_for(self, path, deadline):
        """The first line of `path` once the daemon has written it."""
        while True:
            if path.exists():
                text = path.read_text().strip()
                if text:
                    return text
            if self.process.poll() is not None:
                raise RuntimeError(f"batchd exited at start (status "
                                   f"{self.process.returncode}):\n"
                                   f"{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"batchd did not write {path}:\n"
                                   f"{self.log()}")
            time.sleep(0.05)

    def log(self):
        """The daemon's output so far (all of it, once stopped)."""
        if self.log_path.exists():
            self._log_text = self.log_path.read_text(errors="replace")
        return self._log_text

    def metrics(self):
        """The /metrics page, as text (REQUIRES: metrics=True)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()

    def kill(self):
        """SIGKILL, no drain; then waits for the exit."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self):
        """SIGTERM and wait for the drain (SIGKILL after stop_timeout_s).
        Idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self._log.closed:
            self._log.close()
        if self._temporary and self.directory.is_dir():
            self.log()  # kept for log() after the directory is gone
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False
