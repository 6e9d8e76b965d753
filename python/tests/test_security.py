"""batchd.Loader against secured daemons: a Unix socket, TLS with a token,
and the errors a missing token or the wrong job raise."""
import subprocess

import pytest

import batchd
from batchd_testing.daemon import Daemon
from conftest import SOURCE_DIR, fnv1a64

SIZE = 16
BATCH = 8  # 48 images: 6 batches per epoch
ADMIN_TOKEN = "admin-token-0f1e2d3c4b5a"
JOB_TOKEN = "job-a-token-a5b4c3d2e1f0"


def read_epoch(endpoint, **kwargs):
    loader = batchd.Loader(endpoint, "tiny", BATCH, size=SIZE, seed=9,
                           rank=0, world_size=1, **kwargs)
    out = [(fnv1a64(images.numpy().tobytes()), labels.tolist())
           for images, labels in loader]
    loader.close()
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs")
    subprocess.run([str(SOURCE_DIR / "scripts" / "make_test_certs.sh"),
                    str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture
def secured_daemon(binaries, dataset_dir, certs, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ADMIN_TOKEN}\n{JOB_TOKEN} job-a\n")
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir},
               ["--workers", "2", "--tls-cert", str(certs / "server.pem"),
                "--tls-key", str(certs / "server.key"),
                "--auth-token-file", str(tokens)],
               directory=tmp_path / "d")
    d.endpoint = f"localhost:{d.port}"  # the name the certificate carries
    yield d
    d.stop()


def test_unix_socket_gives_the_bytes_of_tcp(binaries, dataset_dir, tmp_path):
    socket = tmp_path / "batchd.sock"
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir},
               ["--workers", "2", "--unix-socket", str(socket)],
               directory=tmp_path / "d")
    try:
        over_unix = read_epoch(f"unix:{socket}")
        assert over_unix == read_epoch(d.endpoint)
        assert len(over_unix) == 6
        assert batchd.list_datasets(f"unix:{socket}")[0][:2] == ("tiny", 48)
    finally:
        d.stop()


def test_tls_and_token_from_a_file_or_the_environment(
        secured_daemon, daemon, certs, tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    secured = read_epoch(secured_daemon.endpoint, tls_ca=certs / "ca.pem",
                         token_file=token_file)
    assert secured == read_epoch(daemon.endpoint)
    assert batchd.list_datasets(secured_daemon.endpoint,
                                tls_ca=certs / "ca.pem",
                                token_file=token_file)[0][0] == "tiny"
    monkeypatch.setenv("BATCHD_TOKEN", JOB_TOKEN)
    assert read_epoch(secured_daemon.endpoint, tls_ca=certs / "ca.pem",
                      job="job-a") == secured


def test_missing_token_and_other_job_raise_permission_errors(
        secured_daemon, certs, tmp_path, monkeypatch):
    monkeypatch.delenv("BATCHD_TOKEN", raising=False)
    with pytest.raises(batchd.errors.UnauthenticatedError,
                       match="the call has no token"):
        read_epoch(secured_daemon.endpoint, tls_ca=certs / "ca.pem")
    token_file = tmp_path / "token"
    token_file.write_text(JOB_TOKEN + "\n")
    with pytest.raises(PermissionError, match='only stream for job "job-a"'):
        read_epoch(secured_daemon.endpoint, tls_ca=certs / "ca.pem",
                   token_file=token_file, job="job-b")


def test_plaintext_to_a_tls_daemon_says_what_to_give(secured_daemon):
    with pytest.raises(batchd.errors.UnavailableError,
                       match="give tls_ca"):
        read_epoch(secured_daemon.endpoint, connect_timeout=3.0)


def test_bad_security_arguments_are_value_errors(daemon, tmp_path):
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        read_epoch(daemon.endpoint, tls_ca=tmp_path / "ca.pem",
                   tls_cert=tmp_path / "c.pem")
    with pytest.raises(ValueError, match="token file: cannot read"):
        read_epoch(daemon.endpoint, token_file=tmp_path / "missing")
