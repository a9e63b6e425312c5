#!/usr/bin/env python3
"""A local PostgreSQL 16 + pgvector to try `qac export` on, in one command:

    .venv/bin/python3 scripts/pg_local.py DIR
    # prints postgresql://postgres@127.0.0.1:PORT/postgres and runs until Ctrl-C
    # (or SIGTERM); the data directory is DIR/pgdata

It runs the server binaries of PyPI's `pgserver` wheel (its pginstall/
holds PostgreSQL and pgvector; Debian 12 packages no pgvector; `scripts/setup.sh
--test` installs the wheel, or `.venv/bin/pip install pgserver==0.1.4`). The
test suite and the pgvector benchmark start their servers with the same code
(`with pg_local.Server(tmpdir) as pg: pg.url`).

PostgreSQL refuses to run as root: as root, the server runs as the
unprivileged user `nobody` with a data directory that user owns (and, when
`nobody` cannot reach the wheel's binaries, from a copy of them inside DIR).
Otherwise it runs as the calling user.

The server listens on 127.0.0.1 only, on a free port, trust authentication:
for trying things on one machine, not for serving.
"""
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time

RUN_AS = "nobody"


def pginstall():
    """The wheel's pginstall/ directory, or None when pgserver is not installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "pginstall")
    return d if os.path.isfile(os.path.join(d, "bin", "postgres")) else None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, workdir, settings=None, durable=False):
        """settings: extra `-c name=value` server settings. durable=False
        (tests) turns fsync, synchronous commit and full-page writes off;
        True keeps PostgreSQL's defaults (benchmarks)."""
        self.workdir = workdir
        self.settings = {} if durable else {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        self.settings.update(settings or {})
        self.proc = None
        self.install = pginstall()
        if self.install is None:
            raise RuntimeError("pgserver is not installed (scripts/setup.sh --test installs tests/requirements.txt)")
        self.user = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam(RUN_AS)
            self.user = pw

    def _demote(self):
        os.setgid(self.user.pw_gid)
        os.setgroups([])
        os.setuid(self.user.pw_uid)

    def _run(self, args, **kw):
        return subprocess.run(args, preexec_fn=self._demote if self.user else None, **kw)

    def _spawn(self, args, **kw):
        return subprocess.Popen(args, preexec_fn=self._demote if self.user else None, **kw)

    def _reachable(self):
        """Whether the server's user can execute the wheel's binaries (a
        checkout under a private home directory hides them from `nobody`)."""
        try:
            r = self._run([os.path.join(self.install, "bin", "postgres"), "--version"], capture_output=True)
        except OSError:  # exec refused (a directory on the way is closed to the user)
            return False
        return r.returncode == 0

    def _own(self, path):
        if self.user:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def start(self):
        if self.user:
            os.chmod(self.workdir, 0o711)  # let `nobody` through to its directories
            if not self._reachable():
                # the binaries find their libraries at $ORIGIN/../../../pgserver.libs
                # (the wheel's layout): copy both, side by side as in site-packages
                site = os.path.dirname(os.path.dirname(self.install))
                copy = os.path.join(self.workdir, "pgserver-copy")
                shutil.copytree(self.install, os.path.join(copy, "pgserver", "pginstall"), symlinks=True)
                if os.path.isdir(os.path.join(site, "pgserver.libs")):
                    shutil.copytree(os.path.join(site, "pgserver.libs"), os.path.join(copy, "pgserver.libs"))
                for root, dirs, _ in os.walk(copy):
                    for d in dirs + [""]:
                        os.chmod(os.path.join(root, d), 0o755)
                self.install = os.path.join(copy, "pgserver", "pginstall")
        self.data = os.path.join(self.workdir, "pgdata")
        self.sock = os.path.join(self.workdir, "pgsock")
        for d in (self.data, self.sock):
            os.mkdir(d, 0o700)
            self._own(d)
        binp = os.path.join(self.install, "bin")
        r = self._run([os.path.join(binp, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust",
                       "--encoding=UTF8", "--locale=C", "--no-sync"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("initdb failed:\n" + r.stdout + r.stderr)
        self.port = free_port()
        self.log = open(os.path.join(self.workdir, "postgres.log"), "w")
        args = [os.path.join(binp, "postgres"), "-D", self.data, "-p", str(self.port), "-h", "127.0.0.1",
                "-k", self.sock]
        for k, v in self.settings.items():
            args += ["-c", "%s=%s" % (k, v)]
        self.proc = self._spawn(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = "postgresql://postgres@127.0.0.1:%d/postgres" % self.port
        ready = os.path.join(binp, "pg_isready")
        for _ in range(300):
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited with %d; log:\n%s" % (self.proc.returncode, self.read_log()))
            if subprocess.run([ready, "-h", "127.0.0.1", "-p", str(self.port), "-q"]).returncode == 0:
                return self
            time.sleep(0.1)
        raise RuntimeError("postgres did not become ready in 30 s; log:\n" + self.read_log())

    def read_log(self):
        try:
            return open(os.path.join(self.workdir, "postgres.log")).read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: smart shutdown, clients are done by now
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        self.proc = None

    def version(self):
        """(server version, pgvector version) as strings, for the record."""
        out = subprocess.run([os.path.join(self.install, "bin", "postgres"), "--version"], capture_output=True,
                             text=True).stdout.split()[-1]
        ctl = open(os.path.join(self.install, "share", "postgresql", "extension", "vector.control")).read()
        vec = [ln.split("=")[1].strip().strip("'") for ln in ctl.splitlines() if ln.startswith("default_version")][0]
        return out, vec

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        return False


if __name__ == "__main__":
    # `python3 scripts/pg_local.py DIR`: start a server in DIR and print its
    # URL until Ctrl-C or SIGTERM (a shell's background job ignores SIGINT)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/pg_local.py DIR   (a local PostgreSQL + pgvector in DIR, until Ctrl-C)")
    os.makedirs(sys.argv[1], exist_ok=True)
    with Server(os.path.abspath(sys.argv[1]), durable=True) as pg:  # PostgreSQL's own fsync settings
        print(pg.url, pg.version(), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
