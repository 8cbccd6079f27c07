"""The compilation cache as untrusted input (docs/cache.md, Security model): no secret or value of
the user's is stored; hostile http stores cannot hang or bloat a process; entries signed with
TORCH_TPU_CACHE_KEY; planted symlinks, FIFOs and oversized files refused; a warm host tier fills
the persistent one. Every case runs child processes (the tiers are configured once per process)
against a real directory, a real nginx (signing) or a hostile server on loopback."""

import os
import stat
import threading

import pytest

from cache_helpers import PROGRAM, entry_is_signed, entry_is_whole, results
from conftest import run_python
from test_cache_http import SilentServer, nginx  # noqa: F401  (nginx: a real one, WebDAV PUT)

pytestmark = pytest.mark.strict_mode

PREFIX = "torch_tpu compilation cache: "
SECRETS = ("SECRET-api-key-7f3a", "SECRET-env-value-91c2", "SECRET-url-password-55d0")


def shared_only(tmp_path, **env) -> dict:
    return {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared"), **env}


def remote_only(tmp_path, url) -> dict:
    """The persistent tier alone, no preloading: every program is one request to the store."""
    return {"TORCH_TPU_CACHE_DIR": url, "TORCH_TPU_PRELOAD": "0",
            **shared_only(tmp_path, TORCH_TPU_SHARED_CACHE_MAX_BYTES="0")}


def stored_files(*directories):
    return [path for directory in directories if directory.exists()
            for path in directory.rglob("*") if path.is_file()]


# -- 1. secrets ------------------------------------------------------------------------------

def test_stored_files_hold_no_argument_or_variable_value(tmp_path):
    env = {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared"),
           "TORCH_TPU_CACHE_DIR": str(tmp_path / "remote"),
           "TORCH_TPU_SOMETHING": SECRETS[1],
           # A compiler flag value is part of what an executable is, but only as a digest.
           "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    code = PROGRAM + "work(); report()"
    command = ["-c", code, f"--api-key={SECRETS[0]}"]

    def run():
        import subprocess
        import sys
        return subprocess.run([sys.executable, *command], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=300)

    cold, = results(run())
    files = stored_files(tmp_path / "shared", tmp_path / "remote")
    assert any(path.suffix == ".preload" for path in files)  # the manifests are there
    for path in files:
        data = path.read_bytes()
        for secret in (*SECRETS[:2], "xla_cpu_enable_fast_math", "--api-key"):
            assert secret.encode() not in data, (path.name, secret)
    # The manifest still names the run: the same command preloads what the first one used.
    warm, = results(run())
    assert warm["compile_count"] == 0
    assert warm["cache_preloaded"] + warm["cache_hits_shared"] >= cold["compile_count"]


# -- 2. hostile http stores ------------------------------------------------------------------

class HostileServer(SilentServer):
    """An http store on loopback that answers every request with `behaviour(request head)`,
    recording the requests and how many bytes each answer got out."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.requests = []
        self.sent = []  # per answer: (bytes sent, whether the client hung up first)
        super().__init__()

    def url(self, credentials=""):
        return f"http://{credentials}127.0.0.1:{self.port}/cache"

    def _handle(self, connection):
        threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection):
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                request += chunk
            head, _, body = request.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            while length and len(body) < length[0]:
                body += connection.recv(65536)
            self.requests.append(head.decode(errors="replace"))
            sent, hung_up = 0, False
            try:
                for piece in self.behaviour(head):
                    connection.sendall(piece)
                    sent += len(piece)
            except OSError:
                hung_up = True
            self.sent.append((sent, hung_up))


def endless_body(head):
    if head.startswith(b"PUT"):
        yield b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
        return
    yield b"HTTP/1.1 200 OK\r\n\r\n"
    while True:
        yield b"\0" * 65536


def wrapping_chunk_size(head):
    if head.startswith(b"PUT"):
        yield b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
        return
    # 0xffffffffffffffec + the offset wraps a 64-bit size: an unchecked parser loops for ever.
    yield (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"ffffffffffffffec\r\nabcd\r\n0\r\n\r\n")


def huge_announced_length(head):
    if head.startswith(b"PUT"):
        yield b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
        return
    yield b"HTTP/1.1 200 OK\r\nContent-Length: 17179869184\r\n\r\n" + b"x" * 4096


@pytest.fixture
def hostile(request):
    server = HostileServer(request.param)
    yield server
    server.close()


@pytest.mark.parametrize("hostile", [endless_body, huge_announced_length], indirect=True)
def test_oversized_answers_are_cut_off_refused_and_compiled_over(hostile, tmp_path):
    cap = 1 << 20
    completed = run_python(PROGRAM + "work(); work(9); report()", TORCH_TPU_CACHE_TIMEOUT="60",
                           TORCH_TPU_CACHE_MAX_ENTRY_BYTES=str(cap),
                           **remote_only(tmp_path, hostile.url()))
    report, = results(completed)  # work() checks every result against CPU
    assert report["compile_count"] >= 6
    gets = sum(request.startswith("GET") for request in hostile.requests)
    assert gets >= report["compile_count"]
    assert report["cache_rejected_entries"] == {"oversized": gets}
    assert completed.stderr.count(PREFIX + "refusing") == 1, completed.stderr
    assert f"more than TORCH_TPU_CACHE_MAX_ENTRY_BYTES={cap} bytes" in completed.stderr
    # The client hung up near the cap instead of reading until the 60 s timeout.
    endless = [sent for sent, hung_up in hostile.sent if sent > cap]
    assert all(sent < 32 * cap for sent in endless), hostile.sent


@pytest.mark.parametrize("hostile", [wrapping_chunk_size], indirect=True)
def test_malformed_chunk_sizes_do_not_hang_the_process(hostile, tmp_path):
    completed = run_python(PROGRAM + "work(); report()", TORCH_TPU_CACHE_TIMEOUT="30",
                           **remote_only(tmp_path, hostile.url()))
    report, = results(completed)
    assert report["compile_count"] >= 3
    # A malformed answer is a store that cannot be used: one warning, then it is left alone.
    assert "truncated chunked response" in completed.stderr
    assert len([r for r in hostile.requests if r.startswith("GET")]) == 1


def answer_500(head):
    yield b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("hostile", [answer_500], indirect=True)
@pytest.mark.parametrize("how", ["url_credentials", "authorization_file"])
def test_authorization_is_sent_and_never_shown(hostile, tmp_path, how):
    if how == "url_credentials":
        env = remote_only(tmp_path, hostile.url(f"reader:{SECRETS[2]}@"))
        expected = "Authorization: Basic "
    else:
        env = remote_only(tmp_path, hostile.url())
        token = tmp_path / "token"
        token.write_text(f"Bearer {SECRETS[2]}\n")
        env["TORCH_TPU_CACHE_AUTHORIZATION_FILE"] = str(token)
        expected = f"Authorization: Bearer {SECRETS[2]}"
    completed = run_python(PROGRAM + "work(); report(info=torch_tpu.cache_info())", **env)
    report, = results(completed)
    assert hostile.requests and all(expected in request for request in hostile.requests)
    if how == "url_credentials":
        import base64
        assert base64.b64encode(f"reader:{SECRETS[2]}".encode()).decode() in hostile.requests[0]
    # The store answered 500: the warning names it, without the credentials.
    assert "answered HTTP 500" in completed.stderr
    assert SECRETS[2] not in completed.stderr + completed.stdout
    location = f"http://{'***@' if how == 'url_credentials' else ''}127.0.0.1:{hostile.port}/cache"
    assert PREFIX + location + " is unavailable" in completed.stderr
    assert report["info"]["remote"]["location"] == location


# -- 3. authenticity -------------------------------------------------------------------------

@pytest.mark.parametrize("nginx", ["http"], indirect=True)
def test_signed_entries_are_checked_against_the_key(nginx, tmp_path):
    key_file = tmp_path / "cache.key"
    key_file.write_text("team secret 1\n")
    base = {"TORCH_TPU_CACHE_DIR": nginx["url"], "TORCH_TPU_SHARED_CACHE_MAX_BYTES": "0",
            "TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared"), "TORCH_TPU_PRELOAD": "0"}
    signed = {**base, "TORCH_TPU_CACHE_KEY_FILE": str(key_file)}

    completed = run_python(PROGRAM + "work(); report()", **signed)
    cold, = results(completed)
    assert "plain http:// store" not in completed.stderr  # a key is set: no warning
    entries = list(nginx["store"].glob("*.xc"))
    assert len(entries) == cold["compile_count"] >= 3
    assert all(entry_is_whole(p.read_bytes()) and entry_is_signed(p.read_bytes())
               for p in entries)
    assert b"team secret" not in b"".join(p.read_bytes() for p in entries)

    warm, = results(run_python(PROGRAM + "work(); report()", **signed))
    assert warm["compile_count"] == 0 and warm["cache_hits_remote"] == cold["compile_count"]

    # Another key: every entry is refused, counted, warned about once, and compiled over.
    completed = run_python(PROGRAM + "work(); report()", TORCH_TPU_CACHE_KEY="another key",
                           **base)
    other, = results(completed)
    assert other["compile_count"] == cold["compile_count"]
    assert other["cache_rejected_entries"] == {"bad_signature": cold["compile_count"]}
    assert completed.stderr.count(PREFIX + "refusing what") == 1
    assert "signature does not match TORCH_TPU_CACHE_KEY" in completed.stderr

    # Without a key a reader takes signed entries (and is warned that plain http is unsafe);
    # what it writes is unsigned, and a reader with the key refuses such entries.
    for entry in nginx["store"].glob("*.xc"):
        entry.unlink()
    completed = run_python(PROGRAM + "work(); report()", **base)
    unsigned, = results(completed)
    assert completed.stderr.count(PREFIX + "plain http:// store") == 1
    assert not any(entry_is_signed(p.read_bytes()) for p in nginx["store"].glob("*.xc"))
    keyed, = results(run_python(PROGRAM + "work(); report()", **signed))
    assert keyed["cache_rejected_entries"] == {"unsigned": unsigned["compile_count"]}
    assert keyed["compile_count"] == unsigned["compile_count"]


@pytest.mark.parametrize("problem", ["missing", "empty", "both"])
def test_unusable_key_settings_raise_naming_the_setting(tmp_path, problem):
    env = shared_only(tmp_path)
    if problem == "missing":
        env["TORCH_TPU_CACHE_KEY_FILE"] = str(tmp_path / "nope")
        expected = (f"TORCH_TPU_CACHE_KEY_FILE={tmp_path / 'nope'}: expected a readable regular "
                    "file of at most 64 KiB holding the secret")
    elif problem == "empty":
        (tmp_path / "empty").write_text("\n")
        env["TORCH_TPU_CACHE_KEY_FILE"] = str(tmp_path / "empty")
        expected = (f"TORCH_TPU_CACHE_KEY_FILE={tmp_path / 'empty'}: expected a readable regular "
                    "file of at most 64 KiB holding the secret")
    else:
        (tmp_path / "key").write_text("k")
        env.update(TORCH_TPU_CACHE_KEY=SECRETS[1], TORCH_TPU_CACHE_KEY_FILE=str(tmp_path / "key"))
        expected = "set TORCH_TPU_CACHE_KEY or TORCH_TPU_CACHE_KEY_FILE, not both"
    completed = run_python("import torch, torch_tpu\n"
                           "try:\n    (torch.ones(3, device='tpu') + 1).cpu()\n"
                           "except Exception as error:\n    print('ERROR', error)\n", **env)
    assert completed.returncode == 0, completed.stderr
    # The first op that needs a program reports it, naming itself.
    assert f"ERROR aten::fill.Scalar(Float[3], 1.): {expected}\n" == completed.stdout
    assert SECRETS[1] not in completed.stdout + completed.stderr


# -- 4. directory hygiene --------------------------------------------------------------------

def cold_digests(tmp_path, tier):
    """Runs the program once with one tier only; its environment and the digests it stored."""
    if tier == "remote":
        env = remote_only(tmp_path, str(tmp_path / "remote"))
    else:
        env = shared_only(tmp_path, TORCH_TPU_PRELOAD="0")
    cold, = results(run_python(PROGRAM + "work(); report()", **env))
    digests = sorted(path.stem for path in (tmp_path / tier).glob("*.xc"))
    assert len(digests) == cold["compile_count"] >= 3
    return env, digests


@pytest.mark.parametrize("tier", ["shared", "remote"])
@pytest.mark.parametrize("plant", ["fifo", "symlink", "oversized"])
def test_planted_files_are_refused_without_being_read(tmp_path, plant, tier):
    env, digests = cold_digests(tmp_path, tier)
    victim = tmp_path / "victim.xc"
    victim.write_bytes((tmp_path / tier / f"{digests[0]}.xc").read_bytes())
    for digest in digests:
        path = tmp_path / tier / f"{digest}.xc"
        if plant == "fifo":
            path.unlink()
            os.mkfifo(path)  # opening it for reading would block for ever
        elif plant == "symlink":
            path.unlink()
            path.symlink_to(victim)
    if plant == "oversized":
        env["TORCH_TPU_CACHE_MAX_ENTRY_BYTES"] = "1000"
    completed = run_python(PROGRAM + "work(); report()", **env)
    report, = results(completed)
    reason = {"fifo": "not_a_regular_file", "symlink": "symlink", "oversized": "oversized"}[plant]
    assert report["compile_count"] == len(digests)
    # The shared tier is read twice per program (before and under the compile lock): one count.
    assert report["cache_rejected_entries"] == {reason: len(digests)}
    assert completed.stderr.count(PREFIX + "refusing") == 1, completed.stderr
    # Compiling over them replaced the planted files with entries.
    assert all((tmp_path / tier / f"{digest}.xc").is_file() and
               not (tmp_path / tier / f"{digest}.xc").is_symlink() for digest in digests)


def test_lock_files_are_not_opened_through_symlinks(tmp_path):
    shared = tmp_path / "shared"
    env = shared_only(tmp_path, TORCH_TPU_PRELOAD="0")
    results(run_python(PROGRAM + "work(); report()", **env))
    digests = [path.stem for path in shared.glob("*.xc")]
    target = tmp_path / "created_through_lock"
    for digest in digests:
        (shared / f"{digest}.xc").unlink()
        lock = shared / f"{digest}.lock"
        if lock.exists():
            lock.unlink()
        lock.symlink_to(target)
    report, = results(run_python(PROGRAM + "work(); report()", **env))
    assert report["compile_count"] == len(digests)
    assert not target.exists()


def test_shared_tier_is_checked_before_its_manifest_is_read(tmp_path):
    shared = tmp_path / "shared"
    env = shared_only(tmp_path)
    cold, = results(run_python(PROGRAM + "work(); report()", **env))
    assert list(shared.glob("*.preload"))
    # Someone else could now write the directory: nothing in it may be loaded, manifest included.
    shared.chmod(0o777)
    try:
        completed = run_python(PROGRAM + "work(); report()", **env)
        warm, = results(completed)
        assert warm["cache_preloaded"] == 0
        assert warm["cache_hits_shared"] == 0
        assert warm["compile_count"] == cold["compile_count"]
        assert "that only they can write" in completed.stderr
    finally:
        shared.chmod(0o700)


# -- 5. a warm host tier fills the persistent one ---------------------------------------------

def test_host_tier_hits_are_written_to_the_persistent_tier_once(tmp_path):
    shared_env = shared_only(tmp_path, TORCH_TPU_PRELOAD="0")
    cold, = results(run_python(PROGRAM + "work(); report()", **shared_env))
    remote = tmp_path / "remote"
    both = {**shared_env, "TORCH_TPU_CACHE_DIR": str(remote)}
    warm, = results(run_python(PROGRAM + "work(); report()", **both))
    assert warm["compile_count"] == 0 and warm["cache_hits_shared"] == cold["compile_count"]
    entries = sorted(remote.glob("*.xc"))
    assert len(entries) == cold["compile_count"]
    written = {path: path.stat().st_mtime_ns for path in entries}
    # Once is enough: the next process of this host does not write them again.
    results(run_python(PROGRAM + "work(); report()", **both))
    assert {path: path.stat().st_mtime_ns for path in remote.glob("*.xc")} == written
    # Another machine starts warm from the persistent tier.
    other = {**both, "TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "other_host")}
    fresh, = results(run_python(PROGRAM + "work(); report()", **other))
    assert fresh["compile_count"] == 0
    assert fresh["cache_hits_remote"] == cold["compile_count"]


# -- injected store failures ------------------------------------------------------------------

@pytest.mark.parametrize("site", ["store_read", "store_write"])
def test_injected_store_failures_switch_the_store_off_once(tmp_path, site):
    env = remote_only(tmp_path, str(tmp_path / "remote"))
    if site == "store_read":
        results(run_python(PROGRAM + "work(); report()", **env))  # something to read
    code = PROGRAM + (f"import torch_tpu.testing\ntorch_tpu.testing.inject_failure('{site}')\n"
                      "work(); report(pending=torch_tpu.testing.injected_failures_pending("
                      f"'{site}'))")
    completed = run_python(code, **env)
    report, = results(completed)
    assert report["injected_failures"] == {site: 1}
    assert report["pending"] == 0
    assert f"injected {site} failure (torch_tpu.testing)" in completed.stderr
    assert completed.stderr.count(PREFIX + str(tmp_path / "remote")) == 1
    if site == "store_read":
        assert report["cache_hits_remote"] == 0  # off for the rest of the process


def test_stored_entry_permissions(tmp_path):
    results(run_python(PROGRAM + "work(); report()", **shared_only(tmp_path)))
    shared = tmp_path / "shared"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in shared.iterdir() if p.is_file())
