"""`qac eval` against the output of the real trec_eval 9.0.8 program
(tests/reference/trec_eval/, made by tests/reference/gen_trec_eval_fixtures.py):
the same arguments, in trec_eval's order, must give the same exit status and
byte-identical output, for every measure of -m all_trec, the measures'
parameters, and -c, -q, -M and -l, on a synthetic set, literal edge cases and
two real Cranfield runs. The Cranfield cases run twice: with the TREC-form
qrels trec_eval read, and with cranqrel itself, which qac reads natively."""
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

QAC = os.environ["QAC_BIN"]
DATA = os.environ.get("QAC_SHARED_DATA")
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "trec_eval")
doc = json.load(gzip.open(os.path.join(FIX, "expected.json.gz")))
tmp = scratch.mkdtemp(prefix="qac-trec-eval-")
print("reference: trec_eval " + doc["trec_eval"])


def plain(name):
    """Path of a fixture file, gunzipped into the scratch directory if needed."""
    if not name.endswith(".gz"):
        return os.path.join(FIX, name)
    out = os.path.join(tmp, name[:-3])
    if not os.path.exists(out):
        with gzip.open(os.path.join(FIX, name), "rb") as f, open(out, "wb") as g:
            shutil.copyfileobj(f, g)
    return out


failures = total = 0
for s in doc["sets"]:
    qrels_files = [plain(s["qrels"])]
    if s["name"].startswith("cranfield"):
        if not DATA:
            print("FAIL: QAC_SHARED_DATA is not set (the Cranfield cases read cranqrel)")
            sys.exit(1)
        qrels_files.append(os.path.join(DATA, "cranfield", "cranqrel"))
    run = plain(s["run"])
    for qrels in qrels_files:
        same = 0
        for case in s["cases"]:
            total += 1
            p = subprocess.run([QAC, "eval", *case["args"], qrels, run], capture_output=True, text=True)
            tag = "%s (%s) %s" % (s["name"], os.path.basename(qrels), " ".join(case["args"]))
            if p.returncode != case["rc"] or p.stdout != case["stdout"]:
                failures += 1
                print("FAIL %s: exit %d (trec_eval %d) %s" % (tag, p.returncode, case["rc"], p.stderr.strip()))
                want, got = case["stdout"].splitlines(), p.stdout.splitlines()
                for w, g in [(w, g) for w, g in zip(want, got) if w != g][:5]:
                    print("   trec_eval %r\n   qac       %r" % (w, g))
                if len(want) != len(got):
                    print("   %d lines from trec_eval, %d from qac" % (len(want), len(got)))
            else:
                same += 1
        tens = sum("trec_eval_10" in c for c in s["cases"])
        print("%s with %s: %d of %d cases byte-identical (trec_eval 10.0 differs on %d)" %
              (s["name"], os.path.basename(qrels), same, len(s["cases"]), tens))
print("%d of %d cases differ" % (failures, total))
sys.exit(1 if failures else 0)
