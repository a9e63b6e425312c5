"""`qac serve` in its container image against the same binary run bare, on
the same index, in the same run: what the container (port publishing,
overlay filesystem, namespaces) costs in throughput.

Both servers read one Flat index of synthetic Cranfield passages (as
bench_serve.py builds it); wrk drives POST /search with the Cranfield
queries. The two are measured in alternation, `--rounds` times, so that
load from elsewhere on the machine falls on both (ABBA order, both
servers up throughout); the per-round ratios and their median are printed.

  .venv/bin/python3 bench/serve/bench_container.py --qac build/qac --image localhost/qac:test \
      --passages 20000 --duration 20 --concurrency 32

The image is docker/Dockerfile's (tests/docker/test_docker.py builds it as
localhost/qac:test). podman runs it with runc and the ulimits of the test;
set CONTAINERS_CONF to use other settings.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_serve import ROOT, cranfield_queries, free_port, run_wrk, stop, synthetic_passages, wait_health  # noqa: E402


class Container:
    """Stands in for a Popen in wait_health/stop."""

    def __init__(self, name, env):
        self.name, self.env = name, env

    def poll(self):
        r = subprocess.run(["podman", "inspect", "--format", "{{.State.Running}}", self.name],
                           capture_output=True, text=True, env=self.env)
        return None if r.stdout.strip() == "true" else 1

    returncode = 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qac", default=os.path.join(ROOT, "build", "qac"))
    ap.add_argument("--image", default="localhost/qac:test")
    ap.add_argument("--passages", type=int, default=20000)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--concurrency", default="32")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cranfield"))
    ap.add_argument("--work", default=None)
    a = ap.parse_args()

    work = a.work or tempfile.mkdtemp(prefix="qac-bench-container-")
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o755)  # the container's user reads the index
    env = dict(os.environ)
    if "CONTAINERS_CONF" not in env:
        conf = os.path.join(work, "containers.conf")
        with open(conf, "w") as f:
            f.write('[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
                    '[engine]\nruntime = "runc"\n')
        env["CONTAINERS_CONF"] = conf

    corpus = os.path.join(work, f"passages-{a.passages}.tsv")
    if not os.path.exists(corpus):
        passages = synthetic_passages(a.data, a.passages)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f:
            for pid, text in passages:
                f.write(f"{pid}\t{text}\n")
        os.replace(corpus + ".tmp", corpus)
    qfile = os.path.join(work, "queries.jsonl")
    with open(qfile, "w", encoding="utf-8") as f:
        for q in cranfield_queries(os.path.join(a.data, "cran.qry")):
            f.write(json.dumps(q) + "\n")
    index = os.path.join(work, f"index-{a.passages}")
    if not os.path.exists(os.path.join(index, "index.faiss")):
        subprocess.run([a.qac, "index", "build", "--corpus", corpus, "--out", index], check=True,
                       stdout=subprocess.DEVNULL)
    # The image's model must be the host's: same index manifest fingerprint.
    wenv = dict(env, QAC_BENCH_QUERIES=qfile, QAC_BENCH_K="10", QAC_QUIET="1")
    lua = os.path.join(HERE, "search.lua")
    conc = [int(c) for c in a.concurrency.split(",")]
    results = {("bare", c): [] for c in conc} | {("container", c): [] for c in conc}

    def bare():
        port = free_port()
        proc = subprocess.Popen([a.qac, "serve", "--index", index, "--port", str(port)],
                                stdout=subprocess.DEVNULL, env=wenv)
        return proc, f"http://127.0.0.1:{port}", lambda: stop(proc)

    def container():
        port = free_port()
        name = f"qac-bench-{os.getpid()}-{port}"
        subprocess.run(["podman", "run", "-d", "--pull=never", "--name", name, "-p", f"127.0.0.1:{port}:8080",
                        "-v", f"{index}:/data/index:ro", a.image], check=True, env=env, stdout=subprocess.DEVNULL)

        def down():
            subprocess.run(["podman", "stop", "-t", "60", name], env=env, capture_output=True)
            subprocess.run(["podman", "rm", "-f", name], env=env, capture_output=True)
        return Container(name, env), f"http://127.0.0.1:{port}", down

    # Both servers stay up (an idle one costs nothing); the wrk runs
    # alternate in ABBA order so that a trend in the machine's load falls
    # on both alike.
    servers = {}
    try:
        for kind, start in (("bare", bare), ("container", container)):
            servers[kind] = start()
            wait_health(servers[kind][1], servers[kind][0])
            run_wrk(servers[kind][1], 4, 3, lua, wenv)  # warm-up
        for rnd_i in range(a.rounds):
            order = ("bare", "container") if rnd_i % 2 == 0 else ("container", "bare")
            for kind in order:
                for c in conc:
                    r = run_wrk(servers[kind][1], c, a.duration, lua, wenv)
                    results[(kind, c)].append(r)
                    print(f"bench: round {rnd_i + 1} {kind:9s} c={c:<3d} {r['rps']:8.1f} req/s  "
                          f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}",
                          file=sys.stderr)
    finally:
        for _, _, down in servers.values():
            down()

    print(f"\n### serve: container vs bare binary ({time.strftime('%Y-%m-%d')})\n")
    print(f"{a.passages} synthetic Cranfield passages, Flat index, k=10, wrk {a.duration} s per run, "
          f"{a.rounds} rounds in ABBA order, both servers up throughout, image {a.image}.\n")
    print("| concurrency | bare req/s | container req/s | ratio (container/bare) | bare p50 ms | container p50 ms |"
          " bare p99 ms | container p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in conc:
        b, k = results[("bare", c)], results[("container", c)]

        def mean(rs, key):
            return sum(r[key] for r in rs) / len(rs)
        print(f"| {c} | {mean(b, 'rps'):.1f} | {mean(k, 'rps'):.1f} | {mean(k, 'rps') / mean(b, 'rps'):.3f} |"
              f" {mean(b, 'p50_ms'):.2f} | {mean(k, 'p50_ms'):.2f} | {mean(b, 'p99_ms'):.2f} |"
              f" {mean(k, 'p99_ms'):.2f} | {sum(r['errors'] for r in b + k)} |")
        ratios = sorted(kr["rps"] / br["rps"] for br, kr in zip(b, k))
        print(f"\nper round, container/bare at c={c}: " +
              ", ".join(f"{kr['rps'] / br['rps']:.3f}" for br, kr in zip(b, k)) +
              f"; median {ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2:.3f}")


if __name__ == "__main__":
    main()
