#!/usr/bin/env python3
"""The CPU twins of the CUDA trainer's fused passes against PyTorch autograd
in float64, with qac's own dropout mask as an input:

- the post-LN sublayer tail res = resid + mask (proj + bias), out = LN(res),
  and its backward from dL/dout (plus dL/dres from outside, a pre-LN block's
  residual stream): dres, dproj = mask dres, and the LayerNorm's and the
  bias's gradients accumulated onto what was there;
- the FFN's act = GELU(pre + bias) (erf form) and its backward with the
  bias gradient.

Bounds (fp32 against fp64, u = 2^-24): the outputs of row operations carry a
few roundings on top of row sums of C terms, at most about C u = 6e-6 of
the row's magnitudes for C = 96: max |d| / max |ref| <= 1e-5. The column
sums (dw, db, dbias over the rows) may cancel, so each is held to its own
terms: |d| <= (rows + 4) u sum |terms| plus the terms' own error (1e-5 of
their magnitudes, as above), the recursive-summation bound.

Usage: test_fused_twins.py DRIVER"""
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

DRIVER = sys.argv[1]
U = 2.0 ** -24
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(seed, B, T, C, p, dadd, N, I):
    d = scratch.mkdtemp(prefix="qac-fused-")
    subprocess.run([DRIVER, d, str(seed), str(B), str(T), str(C), str(p), str(int(dadd)), str(N), str(I)], check=True)
    return lambda name, *shape: torch.from_numpy(
        np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4").astype(np.float64).reshape(*shape))


def close(name, got, want, tol=1e-5):
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-300)
    check(err <= tol, f"{name}: max|d|/max|ref| {err:.3g} (tol {tol:g})")


def close_sum(name, got, want, abs_terms, rows):
    """Column sums: each column against (rows + 4) u sum|terms| + 1e-5 sum|terms|."""
    bound = ((rows + 4) * U + 1e-5) * abs_terms
    worst = ((got - want).abs() / bound).max().item()
    check(worst <= 1.0, f"{name}: max |d| / bound {worst:.3g} (<= 1)")


for case in ((7, 3, 11, 96, 0.1, False, 37, 200), (8, 2, 17, 96, 0.3, True, 5, 96), (9, 4, 5, 96, 0.0, True, 9, 33)):
    seed, B, T, C, p, with_dadd, N, I = case
    f = run(*case)
    R = B * T
    print(f"== B {B} T {T} C {C} p {p} dadd {with_dadd}; bias+GELU N {N} I {I}")
    proj, bias, resid = f("proj", R, C).requires_grad_(), f("bias", C).requires_grad_(), f("resid", R, C).requires_grad_()
    w, b, mask = f("w", C).requires_grad_(), f("b", C).requires_grad_(), f("mask", R, C)
    res = resid + mask * (proj + bias)
    out = torch.nn.functional.layer_norm(res, (C,), w, b, eps=1e-12)
    dout = f("dout", R, C)
    loss = (out * dout).sum()
    if with_dadd:
        loss = loss + (res * f("dadd", R, C)).sum()
    loss.backward()
    close("residual+ln res", f("res", R, C), res.detach())
    close("residual+ln out", f("out", R, C), out.detach())
    close("residual+ln dres", f("dres", R, C), resid.grad)
    close("residual+ln dproj", f("dproj", R, C), proj.grad)
    # the terms of the column sums, from the reference
    xhat = ((res - res.mean(1, keepdim=True)) / torch.sqrt(res.var(1, unbiased=False, keepdim=True) + 1e-12)).detach()
    close_sum("residual+ln dw", f("dw", C), f("dw0", C) + w.grad, (dout * xhat).abs().sum(0) + f("dw0", C).abs(), R)
    close_sum("residual+ln db", f("db", C), f("db0", C) + b.grad, dout.abs().sum(0) + f("db0", C).abs(), R)
    close_sum("residual+ln dbias", f("dbias", C), f("dbias0", C) + bias.grad,
              proj.grad.abs().sum(0) + f("dbias0", C).abs(), R)

    pre, gbias = f("pre", N, I).requires_grad_(), f("gbias", I).requires_grad_()
    act = torch.nn.functional.gelu(pre + gbias)
    (act * f("gdout", N, I)).sum().backward()
    close("bias+gelu act", f("act", N, I), act.detach())
    close("bias+gelu dpre", f("dpre", N, I), pre.grad)
    close_sum("bias+gelu dbias", f("gdbias", I), f("gdbias0", I) + gbias.grad,
              pre.grad.abs().sum(0) + f("gdbias0", I).abs(), N)

if failures:
    sys.exit(f"{len(failures)} failed: " + "; ".join(failures))
print("all passed")
