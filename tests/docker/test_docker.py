"""The CPU container image, built and run with podman.

Builds docker/Dockerfile from a clean copy of the tree, indexes Cranfield
with the image's own `qac`, serves that index from a container and checks:
/health, /search answers equal to the host binary's on the same index, the
health status the engine reports, that the server runs as the image's
non-root user, that a SIGTERM drains a request in flight and exits 0, and
that no proxy setting or extra CA certificate reached the final image.

No registry is needed: a missing `debian:12` base is made with debootstrap
from the Debian mirror apt uses and `podman import`, and kept for the next
run. podman runs with runc and fixed ulimits (a containers.conf written
here); the host's apt proxy, pip index settings and locally added CA
certificates are passed to the build as build arguments and a build secret.

Exits 77 (skipped) with the reason when podman cannot run containers here.
Environment: QAC_DOCKER=0 skips; QAC_DOCKER_NO_CACHE=1 builds without the
layer cache; QAC_DOCKER_EXTRA_CA=FILE overrides the CA certificates passed;
QAC_DOCKER_DOCS=N indexes only the first N Cranfield documents (quicker).
"""
import filecmp
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

QAC = os.environ.get("QAC_BIN", "qac")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

SHARED = testdata.root()
SOURCE = os.path.abspath(os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
CRAN = os.path.join(SHARED, "cranfield")
BASE = "docker.io/library/debian:12"
BASE_TAGS = [BASE, "docker.io/library/debian:12-slim"]
IMAGE = os.environ.get("QAC_DOCKER_IMAGE", "localhost/qac:test")
IMAGE_USER, IMAGE_UID = "qac", 10001
N_QUERIES, K = 40, 20

failures = []
t_start = time.time()


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)
    return cond


def log(msg):
    print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(77)


class Podman:
    def __init__(self, work):
        # runc and explicit ulimits: some sandboxes refuse crun and the
        # engine's default resource limits.
        conf = os.path.join(work, "containers.conf")
        with open(conf, "w") as f:
            f.write('[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
                    '[engine]\nruntime = "runc"\n')
        self.env = dict(os.environ, CONTAINERS_CONF=conf)

    def __call__(self, *args, check=True, timeout=600, capture=True, **kw):
        r = subprocess.run(["podman", *args], env=self.env, timeout=timeout, text=True,
                           capture_output=capture, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} ... exited {r.returncode}: "
                               f"{(r.stderr or '')[-3000:]}")
        return r

    def out(self, *args, **kw):
        return self(*args, **kw).stdout.strip()


def apt_mirror():
    """The Debian archive apt on this machine uses for bookworm."""
    try:
        r = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE) $(LABEL)"],
                           capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "bookworm" and parts[2] == "Debian":
                return parts[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "http://deb.debian.org/debian/"


def make_base(pm, work):
    """debian:12 from debootstrap, shaped like the official image's sources."""
    if os.geteuid() != 0:
        skip(f"no {BASE} image and debootstrap needs root")
    if not shutil.which("debootstrap"):
        skip(f"no {BASE} image and no debootstrap to make one (scripts/setup.sh --test installs it)")
    mirror = apt_mirror().rstrip("/")
    root = os.path.join(work, "rootfs")
    log(f"making {BASE} with debootstrap from {mirror}")
    r = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", root, mirror + "/"],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"debootstrap failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    security = mirror.rsplit("/", 1)[0] + "/debian-security" if mirror.endswith("/debian") else mirror
    os.remove(os.path.join(root, "etc/apt/sources.list"))
    with open(os.path.join(root, "etc/apt/sources.list.d/debian.sources"), "w") as f:
        f.write(f"Types: deb\nURIs: {mirror}\nSuites: bookworm bookworm-updates\nComponents: main\n"
                "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                f"Types: deb\nURIs: {security}\nSuites: bookworm-security\nComponents: main\n"
                "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    for pat in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/cache/apt/*.bin"):
        for p in glob.glob(os.path.join(root, pat)):
            if os.path.isfile(p):
                os.remove(p)
    tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
    pm("import", "-q", "-", BASE, stdin=tar.stdout)
    tar.wait()
    for tag in BASE_TAGS[1:]:
        pm("tag", BASE, tag)
    subprocess.run(["rm", "-rf", root], check=True)


def host_build_args():
    """What a user behind a proxy passes: apt's proxy and pip's index settings."""
    args = []
    try:
        r = subprocess.run(["apt-config", "dump", "--format", "%v%n", "Acquire::http::Proxy"],
                           capture_output=True, text=True, timeout=30)
        proxy = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
        if proxy and proxy.upper() != "DIRECT":
            args += ["--build-arg", f"APT_PROXY={proxy}"]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    pip = {}
    r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        key, _, val = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in ("index-url", "extra-index-url", "trusted-host"):
            pip[name] = val.strip().strip("'\"")
    for name, arg in (("index-url", "PIP_INDEX_URL"), ("extra-index-url", "PIP_EXTRA_INDEX_URL"),
                      ("trusted-host", "PIP_TRUSTED_HOST")):
        val = os.environ.get(arg) or pip.get(name)
        if val:
            args += ["--build-arg", f"{arg}={val}"]
    return args


def extra_ca(work):
    """Locally added CA certificates (a TLS-intercepting proxy's, say), as one PEM file."""
    src = os.environ.get("QAC_DOCKER_EXTRA_CA")
    files = [src] if src else sorted(glob.glob("/usr/local/share/ca-certificates/**/*.crt", recursive=True))
    pem = ""
    for p in files:
        with open(p, encoding="ascii", errors="replace") as f:
            pem += f.read().strip() + "\n"
    if not pem:
        return None
    path = os.path.join(work, "extra-ca.pem")
    with open(path, "w") as f:
        f.write(pem)
    return path


def clean_context(work):
    """The tree as git sees it (tracked and unignored files), without local builds."""
    ctx = os.path.join(work, "context")
    os.makedirs(ctx)
    r = subprocess.run(["git", "-C", SOURCE, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, timeout=120)
    if r.returncode != 0:  # not a git checkout: copy, minus what .dockerignore names
        shutil.copytree(SOURCE, ctx, dirs_exist_ok=True, symlinks=True,
                        ignore=shutil.ignore_patterns("build*", ".venv*", ".git", "__pycache__"))
        return ctx
    names = [n for n in r.stdout.decode().split("\0") if n and os.path.lexists(os.path.join(SOURCE, n))]
    names = [n for n in names if not os.path.islink(os.path.join(SOURCE, n))]
    for n in names:
        dst = os.path.join(ctx, n)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(SOURCE, n), dst)
    return ctx


def build_image(pm, work):
    ctx = clean_context(work)
    old = pm("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    args = ["build", "--pull=never", "--format", "docker", "-f", os.path.join(ctx, "docker", "Dockerfile"),
            "-t", IMAGE] + host_build_args()
    ca = extra_ca(work)
    if ca:
        args += ["--secret", f"id=extra_ca,src={ca}"]
    if os.environ.get("QAC_DOCKER_NO_CACHE") == "1":
        args.append("--no-cache")
    log(f"podman {' '.join(a for a in args if not a.startswith(('APT_PROXY', 'PIP_')))} {ctx}")
    t0 = time.time()
    r = pm(*args, ctx, check=False, timeout=1500)
    secs = time.time() - t0
    if r.returncode != 0:
        print(r.stdout[-6000:], r.stderr[-6000:], file=sys.stderr)
        raise RuntimeError(f"image build failed ({r.returncode})")
    new = pm.out("image", "inspect", "--format", "{{.Id}}", IMAGE)
    if old and old != new:
        pm("rmi", old, check=False)  # the previous build of this tag, now untagged
    size = int(pm.out("image", "inspect", "--format", "{{.Size}}", IMAGE))
    log(f"image {IMAGE} built in {secs:.0f} s, {size / 1e6:.0f} MB")
    return ca


def check_image_config(pm, ca):
    info = json.loads(pm.out("image", "inspect", IMAGE))[0]
    cfg = info["Config"]
    check(cfg.get("User") == IMAGE_USER, f"image user is {cfg.get('User')!r}, not {IMAGE_USER}")
    hc = (info.get("Healthcheck") or cfg.get("Healthcheck") or {}).get("Test") or []
    check(any("/health" in t for t in hc), f"image has no HEALTHCHECK on /health: {hc}")
    vols = set((cfg.get("Volumes") or {}).keys())
    check({"/data", "/models"} <= vols, f"image volumes {sorted(vols)}")
    # Neither the proxy settings nor the extra certificates may reach it.
    hist = pm.out("history", "--no-trunc", "--format", "{{.CreatedBy}}", IMAGE)
    leaked = [w for w in ("APT_PROXY", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST") if w in hist]
    check(not leaked, f"build arguments {leaked} are recorded in the final image's history")
    if ca:
        with open(ca) as f:
            lines = [ln for ln in f.read().splitlines() if len(ln) == 64 and not ln.startswith("-")]
        probe = lines[len(lines) // 2] if lines else None
        if probe:
            r = pm("run", "--rm", "--pull=never", "--user", "0", "--entrypoint", "sh", IMAGE, "-c",
                   f"grep -rlF '{probe}' /etc /usr/local /usr/share/ca-certificates /usr/share/qac /opt /tmp /root /run /var "
                   "2>/dev/null; ls /run/secrets 2>/dev/null; true", timeout=120)
            check(not r.stdout.strip(), f"the extra CA certificate is in the final image: {r.stdout.strip()}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(base, method, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def write_queries(path):
    with open(os.path.join(CRAN, "cran.qry"), encoding="utf-8") as f:
        parts = f.read().split(".I ")
    with open(path, "w", encoding="utf-8") as out:
        out.write(".I " + ".I ".join(parts[1:N_QUERIES + 1]))


def main():
    if os.environ.get("QAC_DOCKER") == "0":
        skip("QAC_DOCKER=0")
    if not shutil.which("podman"):
        skip("podman is not installed (scripts/setup.sh --test installs podman, runc and debootstrap)")
    if not os.path.exists(os.path.join(CRAN, "cran.all.1400")):
        skip(f"no Cranfield collection at {CRAN}")
    work = scratch.mkdtemp(prefix="qac-docker-")
    os.chmod(work, 0o755)
    pm = Podman(work)
    r = pm("info", check=False, timeout=120)
    if r.returncode != 0:
        skip(f"podman cannot run here: {r.stderr.strip()[-500:]}")
    if pm("image", "exists", BASE, check=False).returncode != 0:
        make_base(pm, work)
    else:
        log(f"base image {BASE} present (kept from an earlier run)")
    for tag in BASE_TAGS[1:]:
        if pm("image", "exists", tag, check=False).returncode != 0:
            pm("tag", BASE, tag)
    r = pm("run", "--rm", "--pull=never", BASE, "true", check=False, timeout=120)
    if r.returncode != 0:
        skip(f"podman cannot start a container here: {r.stderr.strip()[-500:]}")

    name = f"qac-test-{os.getpid()}"
    try:
        ca = build_image(pm, work)
        check_image_config(pm, ca)

        # Index Cranfield with the image's own qac (as its non-root user).
        data = os.path.join(work, "data")
        os.makedirs(data)
        os.chmod(data, 0o777)
        corpus_dir, corpus = CRAN, "cran.all.1400"
        n_docs = int(os.environ.get("QAC_DOCKER_DOCS", "0"))
        if n_docs > 0:
            corpus_dir, corpus = os.path.join(work, "corpus"), "subset.all"
            os.makedirs(corpus_dir)
            with open(os.path.join(CRAN, "cran.all.1400"), encoding="utf-8") as f:
                docs = f.read().split("\n.I ")
            with open(os.path.join(corpus_dir, corpus), "w", encoding="utf-8") as f:
                f.write("\n.I ".join(docs[:n_docs]) + "\n")
            os.chmod(corpus_dir, 0o755)
        t0 = time.time()
        pm("run", "--rm", "--pull=never", "-v", f"{corpus_dir}:/corpus:ro", "-v", f"{data}:/data/out", IMAGE,
           "index", "build", "--corpus", f"/corpus/{corpus}", "--format", "cranfield",
           "--out", "/data/out/index", timeout=900)
        index = os.path.join(data, "index")
        check(os.path.exists(os.path.join(index, "manifest.json")), "the container wrote no index")
        log(f"indexed Cranfield ({n_docs or 1400} documents) in the container in {time.time() - t0:.0f} s")

        # The host binary's answers on that index.
        qfile = os.path.join(work, "queries.qry")
        write_queries(qfile)
        host_run = os.path.join(work, "host.run")
        subprocess.run([QAC, "search", "--index", index, "--queries", qfile, "--run", host_run, "--k", str(K)],
                       check=True, stderr=subprocess.DEVNULL, timeout=600)

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        pm("run", "-d", "--pull=never", "--name", name, "-p", f"127.0.0.1:{port}:8080",
           "-v", f"{index}:/data/index:ro", IMAGE, timeout=120)
        end, status = time.time() + 180, None
        while time.time() < end:
            try:
                status, body = http(base, "GET", "/health", timeout=5)
                if status == 200:
                    break
            except OSError:
                pass
            if pm.out("inspect", "--format", "{{.State.Running}}", name) != "true":
                break
            time.sleep(0.5)
        if not check(status == 200, f"/health answered {status}"):
            print(pm("logs", name, check=False).stderr[-4000:], file=sys.stderr)
            raise RuntimeError("the container did not become healthy")
        log(f"container {name} serving on {base}")

        # /search through the published port equals the host binary's run.
        served_run = os.path.join(work, "served.run")
        r = subprocess.run([QAC, "search", "--server", base, "--queries", qfile, "--run", served_run,
                            "--k", str(K)], capture_output=True, text=True, timeout=600)
        check(r.returncode == 0, f"qac search --server: {r.stderr[-2000:]}")
        same = os.path.exists(served_run) and filecmp.cmp(host_run, served_run, shallow=False)
        n_lines = sum(1 for _ in open(host_run))
        check(n_lines == N_QUERIES * K, f"host run has {n_lines} lines")
        check(same, "the container's /search answers differ from the host binary's")
        log(f"/search: {n_lines} run lines for {N_QUERIES} queries, identical to the host binary's: {same}")
        status, body = http(base, "POST", "/search", {"query": "boundary layer separation", "k": 3})
        hits = json.loads(body).get("results", [[]])[0] if status == 200 else []
        check(len(hits) == 3, f"POST /search: {status} {body[:200]!r}")

        # The engine's own view of the HEALTHCHECK.
        r = pm("healthcheck", "run", name, check=False, timeout=60)
        check(r.returncode == 0, f"podman healthcheck run: {r.returncode} {r.stdout.strip()} {r.stderr.strip()}")
        health = pm.out("inspect", "--format", "{{.State.Health.Status}}", name)
        check(health == "healthy", f"engine reports health {health!r}")
        log(f"engine health: {health}")

        # The server process runs as the image's user, not root.
        pid = int(pm.out("inspect", "--format", "{{.State.Pid}}", name))
        with open(f"/proc/{pid}/status") as f:
            uids = next(line.split()[1:] for line in f if line.startswith("Uid:"))
        user = pm.out("top", name, "user", "comm").splitlines()[1:]
        check(all(int(u) != 0 for u in uids), f"server process uids {uids}")
        check(all(line.split()[0] == IMAGE_USER for line in user if line.strip()), f"podman top: {user}")
        log(f"server process uids {uids}, podman top: {[' '.join(u.split()) for u in user]}")

        # SIGTERM while requests are in flight: they finish, then exit 0.
        body = {"texts": ["slender body theory at transonic speeds and the area rule " * 6] * 64}
        done = []

        def one():
            try:
                st, b = http(base, "POST", "/encode", body, timeout=300)
                ok = st == 200 and len(json.loads(b)["embeddings"]) == 64
            except (OSError, ValueError):
                st, ok = -1, False
            done.append((time.time(), st, ok))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        inflight_seen = False
        end = time.time() + 30
        while time.time() < end and not inflight_seen:  # wait until the server holds them
            st, m = http(base, "GET", "/metrics", timeout=10)
            for line in m.decode().splitlines():
                if line.startswith("qac_inflight_requests ") and float(line.split()[1]) >= 2:
                    inflight_seen = True  # /metrics itself is one of them
            time.sleep(0.02)
        t_kill = time.time()
        pm("kill", "--signal", "TERM", name)
        rc = pm.out("wait", name, timeout=120)
        for t in threads:
            t.join(300)
        check(inflight_seen, "no request was seen in flight before SIGTERM")
        check(rc == "0", f"container exit code after SIGTERM: {rc}")
        check(len(done) == 4 and all(st == 200 and ok for _, st, ok in done),
              f"in-flight requests during the drain: {[(st, ok) for _, st, ok in done]}")
        late = sum(1 for t, _, _ in done if t > t_kill)
        check(late >= 1, "no request finished after SIGTERM: nothing was drained")
        log(f"drain: {len(done)} requests answered 200, {late} of them after SIGTERM; exit code {rc}")
        logs = pm("logs", name, check=False)
        print((logs.stdout + logs.stderr).strip()[-800:])
    finally:
        pm("rm", "-f", name, check=False, timeout=120)
    log(f"docker test done in {time.time() - t_start:.0f} s")
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
