"""An S3-compatible server for the Python tests: s3rver with its SigV4
signatures checked (testing/s3rver/s3_server.js), on a free loopback port.
Its C++ twin is testing/object_servers.h, its shell twin
testing/shell/object_servers.sh.

    from batchd_testing.object_servers import S3Server
    with S3Server("build", tmp_path / "s3", ["bucket"]) as s3:
        s3.put_file("bucket", "train/shard-000000.tar", path)
        s3.endpoint                     # "http://127.0.0.1:PORT"

Keys: ACCESS_KEY / SECRET_KEY (s3rver's own). Objects are put with curl
--aws-sigv4. The constructor raises RuntimeError with the server's log if
it does not serve within `start_timeout_s`. Not thread-safe.
"""
import os
import pathlib
import shutil
import subprocess
import time

ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
REGION = "us-east-1"
_REPO = pathlib.Path(__file__).resolve().parents[3]


class S3Server:
    """s3_server.js keeping its objects under `directory`."""

    def __init__(self, build, directory, buckets, *, start_timeout_s=20.0):
        modules = pathlib.Path(build).resolve() / "testing" / "s3rver" / "node_modules"
        if not (modules / "s3rver").is_dir():
            raise RuntimeError(f"no s3rver in {modules}: build the "
                               f"batchd_s3rver_npm target")
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        port_file = self.directory / "port"
        port_file.unlink(missing_ok=True)
        args = [shutil.which("node") or "node", "--openssl-legacy-provider",
                str(_REPO / "testing" / "s3rver" / "s3_server.js"),
                "--modules", str(modules),
                "--directory", str(self.directory / "data"),
                "--port", "0", "--port-file", str(port_file)]
        for bucket in buckets:
            args += ["--bucket", bucket]
        self.log_path = self.directory / "s3.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"s3_server.js did not start:\n"
                                   f"{self.log_path.read_text()}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def put_file(self, bucket, key, path):
        """PUTs the file at `path` as s3://bucket/key."""
        subprocess.run(
            ["curl", "--silent", "--show-error", "--fail",
             "--header", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
             "--aws-sigv4", f"aws:amz:{REGION}:s3",
             "--user", f"{ACCESS_KEY}:{SECRET_KEY}",
             "--upload-file", os.fspath(path),
             f"{self.endpoint}/{bucket}/{key}"],
            check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class NginxServer:
    """Debian's nginx serving `root` over plain HTTP on a free loopback
    port, with byte ranges and ETags (what an http:// dataset needs); the
    HTTP half of testing/object_servers.h's StartNginx. Raises RuntimeError
    with its log if it does not serve within `start_timeout_s`."""

    def __init__(self, root, directory, *, start_timeout_s=10.0):
        import socket
        nginx = "/usr/sbin/nginx"
        if not os.access(nginx, os.X_OK):
            raise RuntimeError("nginx is not installed (Debian package nginx)")
        self.directory = pathlib.Path(directory)
        (self.directory / "tmp").mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / "error.log"
        # nginx cannot report a port it picked: take one free now (another
        # process may take it first; then the start fails and is retried).
        for _ in range(5):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            d = self.directory
            (d / "nginx.conf").write_text(
                "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                f"pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
                "events { worker_connections 512; }\n"
                "http {\n  access_log off;\n"
                "  default_type application/octet-stream;\n"
                + "".join(f"  {kind}_temp_path {d}/tmp/{kind};\n" for kind in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
                + f"  server {{\n    listen 127.0.0.1:{self.port};\n"
                f"    root {pathlib.Path(root).resolve()};\n    etag on;\n"
                "  }\n}\n")
            self.process = subprocess.Popen(
                [nginx, "-p", str(d), "-c", str(d / "nginx.conf"), "-e",
                 str(self.log_path)], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + start_timeout_s
            while self.process.poll() is None and time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", self.port),
                                             timeout=1).close()
                    self.url = f"http://127.0.0.1:{self.port}"
                    return
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise RuntimeError(f"nginx did not start:\n"
                           f"{self.log_path.read_text() if self.log_path.exists() else ''}")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
