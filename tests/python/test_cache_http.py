"""The compilation cache's persistent tier over http(s):// (TORCH_TPU_CACHE_DIR=http://...):
against a real nginx with WebDAV PUT on loopback (plain and TLS with a self-signed certificate),
one that goes away mid-run, and one that never answers."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from cache_helpers import PROGRAM, entry_is_whole, results
from conftest import run_python

# Counts compiles and cache hits of strict mode's per-op programs.
pytestmark = pytest.mark.strict_mode

PREFIX = "torch_tpu compilation cache: "
UNAVAILABLE = PREFIX + "http://127.0.0.1:"
NGINX_CONFIG = """
{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log {prefix}/access.log;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  server {{
    listen 127.0.0.1:{port}{tls};
    root {prefix}/store;
    location / {{
      dav_methods PUT DELETE;
      create_full_put_path on;
      client_max_body_size 0;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "nginx exited at start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nginx did not listen on port {port}")


def self_signed_certificate(directory) -> tuple:
    """A certificate for 127.0.0.1 and its key, made with the openssl command line tool."""
    certificate, key = directory / "server.pem", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(certificate)],
                   check=True, capture_output=True)
    return certificate, key


@pytest.fixture(params=["http", "https"])
def nginx(tmp_path, request):
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        message = "nginx is missing: `make setup` installs it when run as root"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    prefix = tmp_path / "nginx"
    (prefix / "store").mkdir(parents=True)
    port = free_port()
    # As root, nginx's workers would drop to an unprivileged user unable to write the temp dir.
    user = "user root;" if os.geteuid() == 0 else ""
    tls, client_env = "", {}
    if request.param == "https":
        certificate, key = self_signed_certificate(prefix)
        tls = f" ssl;\n    ssl_certificate {certificate};\n    ssl_certificate_key {key}"
        client_env = {"SSL_CERT_FILE": str(certificate)}  # OpenSSL's trust store override
    config = prefix / "nginx.conf"
    config.write_text(NGINX_CONFIG.format(user=user, prefix=prefix, port=port, tls=tls))
    process = subprocess.Popen([binary, "-p", str(prefix), "-c", str(config), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_listening(port, process)
        yield {"url": f"{request.param}://127.0.0.1:{port}/cache",
               "store": prefix / "store" / "cache", "process": process, "env": client_env}
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)


def no_shared_tier(tmp_path) -> dict:
    return {"TORCH_TPU_SHARED_CACHE_MAX_BYTES": "0",
            "TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared")}


def test_warm_http_store_makes_a_new_process_compile_nothing(nginx, tmp_path):
    env = {"TORCH_TPU_CACHE_DIR": nginx["url"], **nginx["env"], **no_shared_tier(tmp_path)}
    cold, = results(run_python(PROGRAM + "work(); report()", **env))
    assert cold["compile_count"] >= 3
    stored = list(nginx["store"].glob("*.xc"))
    assert len(stored) == cold["compile_count"]
    assert all(entry_is_whole(path.read_bytes()) for path in stored)

    completed = run_python(PROGRAM + "work(); report(info=torch_tpu.cache_info())", **env)
    warm, = results(completed)
    assert warm["compile_count"] == 0
    assert warm["cache_hits_remote"] == cold["compile_count"]
    assert warm["info"]["remote"]["location"] == nginx["url"]
    assert warm["info"]["remote"]["entries"] is None  # an http store cannot be listed
    assert PREFIX + nginx["url"] not in completed.stderr


def test_server_going_away_mid_run_degrades_to_local_tiers(nginx, tmp_path):
    # The child stops the server between two batches of programs: the first batch is stored
    # remotely, the second finds no server, warns once and goes on compiling locally. (Widths 6,
    # 7, 9: evenly stepped widths would be a growing sequence, whose later launches share
    # bucketed programs and grow full storages, csrc/exec/growing_shapes.h.)
    code = PROGRAM + f"""
work(6); report(phase="served")
os.kill({nginx["process"].pid}, signal.SIGTERM)
while True:
    try:
        socket.create_connection(("127.0.0.1", {nginx["url"].split(":")[2].split("/")[0]}),
                                 timeout=0.2).close()
        time.sleep(0.05)
    except OSError:
        break
started = time.monotonic()
work(7); work(9); report(phase="gone", seconds=time.monotonic() - started)
"""
    completed = run_python("import signal\n" + code, TORCH_TPU_CACHE_DIR=nginx["url"],
                           TORCH_TPU_CACHE_TIMEOUT="2", **nginx["env"], **no_shared_tier(tmp_path))
    served, gone = results(completed)
    assert served["compile_count"] >= 3
    assert len(list(nginx["store"].glob("*.xc"))) == served["compile_count"]
    assert gone["compile_count"] == 3 * served["compile_count"]
    assert gone["cache_hits_remote"] == 0
    assert completed.stderr.count(PREFIX + nginx["url"]) == 1, completed.stderr
    assert "is unavailable" in completed.stderr
    # A refused connection is not a timeout: no waiting once the server is gone.
    assert gone["seconds"] < 10


class SilentServer:
    """Accepts connections and never answers: a stalled object store."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self._handle(connection)

    def _handle(self, connection):
        self.connections.append(connection)  # held open, never answered

    def close(self):
        self.listener.close()
        for connection in self.connections:
            connection.close()


def test_slow_server_costs_one_timeout_then_is_left_alone(tmp_path):
    server = SilentServer()
    try:
        code = PROGRAM + ("started = time.monotonic(); work(); work(9)\n"
                          "report(seconds=time.monotonic() - started)")
        completed = run_python(code, TORCH_TPU_CACHE_DIR=f"http://127.0.0.1:{server.port}/c",
                               TORCH_TPU_CACHE_TIMEOUT="0.5", **no_shared_tier(tmp_path))
        report, = results(completed)
        # One request waited out the timeout; after it the store was dropped for the process.
        assert len(server.connections) == 1
        assert report["compile_count"] >= 6
        assert report["cache_hits_remote"] == 0
        assert completed.stderr.count(UNAVAILABLE) == 1, completed.stderr
        assert "no complete answer within 0.5 s" in completed.stderr
        assert report["seconds"] < 10
    finally:
        server.close()


@pytest.mark.parametrize("nginx", ["https"], indirect=True)
def test_untrusted_certificate_is_refused_once_and_local_tiers_carry_on(nginx, tmp_path):
    # Without the self-signed certificate in its trust store the client must not talk to the
    # server: one warning naming the verification failure, then compiling as if it were absent.
    completed = run_python(PROGRAM + "work(); work(9); report()",
                           TORCH_TPU_CACHE_DIR=nginx["url"], **no_shared_tier(tmp_path))
    report, = results(completed)
    assert report["compile_count"] >= 6
    assert report["cache_hits_remote"] == 0
    assert completed.stderr.count(PREFIX + nginx["url"]) == 1, completed.stderr
    assert "TLS certificate of 127.0.0.1 not trusted" in completed.stderr
    assert not nginx["store"].exists() or not list(nginx["store"].glob("*.xc"))
