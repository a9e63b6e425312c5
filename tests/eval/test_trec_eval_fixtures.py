"""`qac eval` against the output of the real trec_eval 9.0.8 program
(tests/reference/trec_eval/, made by tests/reference/gen_trec_eval_fixtures.py):
the same arguments, in trec_eval's order, must give the same exit status and
byte-identical output, for -c, -q, -M and -l."""
import json
import os
import subprocess
import sys

QAC = os.environ["QAC_BIN"]
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "trec_eval")
doc = json.load(open(os.path.join(FIX, "expected.json")))
qrels, run = os.path.join(FIX, "qrels.txt"), os.path.join(FIX, "run.txt")
print("reference: trec_eval " + doc["trec_eval"])
failures = 0
for case in doc["cases"]:
    p = subprocess.run([QAC, "eval", *case["args"], qrels, run], capture_output=True, text=True)
    tag = " ".join(a for a in case["args"] if a != "-m")
    if p.returncode != case["rc"] or p.stdout != case["stdout"]:
        failures += 1
        print("FAIL %s: exit %d (trec_eval %d) %s" % (tag, p.returncode, case["rc"], p.stderr.strip()))
        want, got = case["stdout"].splitlines(), p.stdout.splitlines()
        diff = [(w, g) for w, g in zip(want, got) if w != g][:5]
        for w, g in diff:
            print("   trec_eval %r\n   qac       %r" % (w, g))
        if len(want) != len(got):
            print("   %d lines from trec_eval, %d from qac" % (len(want), len(got)))
    else:
        note = " (trec_eval 10.0 differs here)" if "trec_eval_10" in case else ""
        print("ok   %s: %d lines identical%s" % (tag, len(p.stdout.splitlines()), note))
print("%d of %d cases differ" % (failures, len(doc["cases"])))
sys.exit(1 if failures else 0)
