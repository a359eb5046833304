"""A real nginx serving Bazel's HTTP remote cache: WebDAV PUT into a
temporary root (Bazel writes `ac/HASH` and `cas/HASH`, reads them back
with GET), on a free loopback port, every path it writes (pid, logs,
request bodies) in its own temporary directory, run as the current
user; stopped (and reaped) by the test."""
import grp
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from redis_support import free_port, wait_until_listening

NGINX = os.environ.get("AUTOTUNE_NGINX", "/usr/sbin/nginx")
# .ci/run sets it: there a missing nginx fails the test instead of
# skipping it.
REQUIRE_ENV = "AUTOTUNE_REQUIRE_NGINX"

CONFIG = """\
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
{user}
events {{
    worker_connections 64;
}}
http {{
    access_log {dir}/access.log;
    log_not_found off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/root;
        client_max_body_size 0;
        location / {{
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
    }}
}}
"""


def require_nginx():
    if os.access(NGINX, os.X_OK):
        return
    message = f"{NGINX} is not installed (apt-get install nginx-light)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message}; {REQUIRE_ENV}=1 requires it")
    pytest.skip(message)


class NginxCache:
    """`url` is what --remote_cache takes; `root` holds what was PUT."""

    def __init__(self):
        require_nginx()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="autotune-nginx-")
        self.root = os.path.join(self.dir, "root")
        os.mkdir(self.root)
        # As root, nginx's workers would switch to `nobody`, who may not
        # write the root: they stay the current user. (Otherwise nginx
        # cannot switch and warns about the directive.)
        user = ""
        if os.geteuid() == 0:
            user = (f"user {pwd.getpwuid(os.getuid()).pw_name} "
                    f"{grp.getgrgid(os.getgid()).gr_name};")
        self.config = os.path.join(self.dir, "nginx.conf")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(dir=self.dir, port=self.port, user=user))
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.dir, "-c", self.config, "-e",
             os.path.join(self.dir, "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()

    def _wait_ready(self):
        try:
            wait_until_listening(
                self.proc, self.port, "nginx", lambda: (
                    ": " + self.proc.stderr.read().decode(errors="replace")
                    + self.error_log()))
        except RuntimeError:
            self.stop()  # its folder and, if it still runs, the server
            raise

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def requests(self):
        """(method, path, status) of every request, in order."""
        out = []
        try:
            with open(os.path.join(self.dir, "access.log")) as f:
                lines = f.read().splitlines()
        except OSError:
            return out
        for line in lines:
            # 127.0.0.1 - - [date] "PUT /cas/abc HTTP/1.1" 201 0 "-" "..."
            try:
                request, rest = line.split('"', 2)[1:]
                method, path = request.split()[:2]
                out.append((method, path, int(rest.split()[0])))
            except (ValueError, IndexError):
                continue
        return out

    def stored(self, kind):
        """The names of the files Bazel stored under ac/ or cas/."""
        folder = os.path.join(self.root, kind)
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
