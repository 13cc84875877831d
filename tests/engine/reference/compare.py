#!/usr/bin/python3
"""Compares two safetensors files tensor by tensor and reports the worst one.

    compare.py A.safetensors B.safetensors [--rtol 1e-5] [--base WEIGHTS.safetensors]

B is the reference. For every tensor the error is norm-wise relative,
    err = ||a - b||_2 / max(||b||_2, atol)
(element-wise relative error is meaningless for fp32 gradients that are near zero by
cancellation). With --base, tensors named "step.<name>" are compared as updates,
(a - w) against (b - w) with w = <name> from WEIGHTS: one AdamW step moves a weight by
about lr, far below the weight's own size, so comparing weights after the step would hide
a wrong update (missing bias correction, decay on a norm) under the weight's magnitude.
An fp32 file cannot hold w + update closer than one ulp of the result, so for these
    err = max(0, ||a - b|| - ||ulp_fp32(b)||) / ||b - w||.
Both files must hold the same names and shapes. Exit 0 when every err <= rtol, else 1.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description="Compare two safetensors files (B is the reference)")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-12,
                    help="floor of the reference norm in the denominator (default 1e-12)")
    ap.add_argument("--base", help="weights the 'step.<name>' tensors started from")
    ap.add_argument("--show", type=int, default=5, help="tensors listed, worst first")
    args = ap.parse_args(argv)

    a, _ = safetensors_min.load(args.a)
    b, _ = safetensors_min.load(args.b)
    base = safetensors_min.load(args.base)[0] if args.base else {}
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a or only_b:
        print(f"compare: names differ: only in {args.a}: {only_a[:8]}; only in {args.b}: {only_b[:8]}")
        return 1

    rows = []
    for name in b:
        x, y = a[name].double(), b[name].double()
        if list(x.shape) != list(y.shape):
            print(f"compare: {name}: shape {list(x.shape)} != {list(y.shape)}")
            return 1
        kind = ""
        if args.base and name.startswith("step."):
            w = base.get(name[len("step."):])
            if w is None:
                print(f"compare: {name}: no weight '{name[5:]}' in {args.base}")
                return 1
            # The stored result w + update is fp32: its rounding (up to one ulp of the new
            # weight) is no error of the update, so it is taken off before dividing.
            b32 = b[name].float().abs()
            ulp = (torch.nextafter(b32, torch.full_like(b32, float("inf"))) - b32).double()
            floor = float(torch.linalg.norm(ulp.reshape(-1)))
            x, y = x - w.double(), y - w.double()
            kind = " (update)"
        else:
            floor = 0.0
        diff = (x - y).abs()
        num = float(torch.linalg.norm((x - y).reshape(-1)))
        den = max(float(torch.linalg.norm(y.reshape(-1))), args.atol)
        # NaN anywhere must fail, so no max() here (max(0, nan) is 0 in Python).
        err = num / den if math.isnan(num) or math.isnan(den) else max(0.0, num - floor) / den
        worst_at = int(diff.reshape(-1).argmax()) if diff.numel() else 0
        max_abs = float(diff.reshape(-1)[worst_at]) if diff.numel() else 0.0
        ref_at = float(y.reshape(-1)[worst_at]) if diff.numel() else 0.0
        rows.append((err, name + kind, max_abs, worst_at, ref_at))

    rows.sort(key=lambda r: -(math.inf if math.isnan(r[0]) else r[0]))
    failed = [r for r in rows if not r[0] <= args.rtol]  # NaN fails too
    for err, name, max_abs, at, ref in rows[:args.show]:
        print(f"  {name:48s} rel {err:.3e}  max |a-b| {max_abs:.3e} at [{at}] (ref {ref:+.6e})")
    worst = rows[0] if rows else (0.0, "(no tensors)", 0.0, 0, 0.0)
    verdict = "FAIL" if failed else "ok"
    print(f"compare: {verdict}: {len(rows)} tensors, worst {worst[1]} rel {worst[0]:.3e} "
          f"(rtol {args.rtol:g}); {len(failed)} over")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
