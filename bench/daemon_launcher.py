"""The one way the Python benchmarks start a batchd daemon.

    from daemon_launcher import Daemon
    with Daemon(build, {"bench": data}, ["--workers", "1"], cores="0") as d:
        run_client(d.endpoint)          # "127.0.0.1:PORT"
        run_client(d.unix_endpoint)     # "unix:PATH", with unix_socket=True
        cpu = proc_cpu_seconds(d.pid)
        page = d.metrics()              # with metrics=True

The daemon listens on a free loopback port (and, with unix_socket=True, on
a Unix socket in its temporary directory; with metrics=True it serves
/metrics on another port), pinned to `cores` with taskset when given. Leaving the
block sends SIGTERM and waits for the drain (SIGKILL after 20 s); its
stderr is kept in a temporary directory, `log()` reads it, and the
directory is removed when the daemon stops (a failed start included).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request


class Daemon:
    def __init__(self, build, datasets, flags=(), cores=None, metrics=False,
                 unix_socket=False):
        self._tmp = tempfile.mkdtemp(prefix="batchd-bench-")
        port_file = os.path.join(self._tmp, "port")
        metrics_file = os.path.join(self._tmp, "metrics-port")
        args = [os.path.join(build, "server", "batchd"), "--host", "127.0.0.1",
                "--port", "0", "--port-file", port_file]
        for name, path in datasets.items():
            args += ["--dataset", f"{name}={path}"]
        if metrics:
            args += ["--metrics-port", "0", "--metrics-port-file", metrics_file]
        self.unix_endpoint = None
        if unix_socket:
            socket_path = os.path.join(self._tmp, "batchd.sock")
            self.unix_endpoint = f"unix:{socket_path}"
            args += ["--unix-socket", socket_path]
        if cores is not None and shutil.which("taskset"):
            args = ["taskset", "-c", cores] + args
        self._log_path = os.path.join(self._tmp, "batchd.log")
        self._log = ""
        self._process = subprocess.Popen(
            args + list(flags), stdout=subprocess.DEVNULL,
            stderr=open(self._log_path, "w"))
        self.pid = self._process.pid
        try:
            port = self._wait_for(port_file)
            self.endpoint = f"127.0.0.1:{port}"
            self.metrics_port = (self._wait_for(metrics_file) if metrics
                                 else None)
        except BaseException:
            self.stop()
            raise

    def _wait_for(self, path):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(path):
                text = open(path).read().strip()
                if text:
                    return text
            if self._process.poll() is not None:
                raise RuntimeError(f"batchd exited at start:\n{self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"batchd did not write {path}:\n{self.log()}")

    def log(self):
        """The daemon's stderr so far (all of it, once stopped)."""
        if os.path.isdir(self._tmp):
            with open(self._log_path) as f:
                self._log = f.read()
        return self._log

    def metrics(self):
        """The /metrics page, as text."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()

    def stop(self):
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if os.path.isdir(self._tmp):
            self.log()  # kept for log() after the directory is gone
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
