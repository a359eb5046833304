"""A real redis-server for the remote cache tests: started on a free
loopback port in a temporary directory, stopped (and reaped) by the test."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_listening(proc, port, name, exit_detail=lambda: "",
                         within_s=10):
    """Waits until the server `proc` (called `name`) accepts connections on
    the loopback `port`; RuntimeError if it exits first (exit_detail()
    follows its status) or is not listening within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{name} exited with {proc.returncode}{exit_detail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{name} did not start within {within_s} s")


def require_redis_server():
    if shutil.which("redis-server"):
        return
    if os.environ.get("CI"):
        pytest.fail("redis-server is not installed (.ci/run installs it)")
    pytest.skip("redis-server is not installed (apt-get install redis-server)")


class RedisServer:
    def __init__(self, password=None, tls=False):
        require_redis_server()
        self.port = free_port()
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="autotune-redis-")
        args = ["redis-server", "--port", str(self.port), "--bind",
                "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                self.dir, "--daemonize", "no", "--loglevel", "warning"]
        if password:
            args += ["--requirepass", password]
        self.ca_file = None
        if tls:  # TLS only: the plain port is closed
            self.ca_file = self._self_signed_certificate()
            args[1:3] = ["--port", "0", "--tls-port", str(self.port),
                         "--tls-cert-file", self.ca_file, "--tls-key-file",
                         os.path.join(self.dir, "key.pem"),
                         "--tls-auth-clients", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.url = f"{'rediss' if tls else 'redis'}://127.0.0.1:{self.port}/0"
        self._wait_ready()

    def _wait_ready(self):
        wait_until_listening(self.proc, self.port, "redis-server")

    def _self_signed_certificate(self):
        if not shutil.which("openssl"):
            pytest.skip("openssl is not installed")
        cert = os.path.join(self.dir, "cert.pem")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
             "-keyout", os.path.join(self.dir, "key.pem"), "-out", cert,
             "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
             "subjectAltName=IP:127.0.0.1"], check=True,
            capture_output=True)
        return cert

    def client(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port,
                           password=self.password, socket_timeout=5)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
