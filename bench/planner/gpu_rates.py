#!/usr/bin/env python3
"""Measures the rates the planner's GPU model is built from, on one GPU, into one JSON file.

    python3 bench/planner/gpu_rates.py --out rates.json [--budget 45]

What it measures (PyTorch only, bf16, CUDA events, median of timed repeats after warm-up):
  - gemm: C[m x n] = A[m x k] B[k x n] TFLOP/s over the shapes of transformer layers: m =
    tokens of a micro-batch (b T), n and k from hidden sizes 768..16384 and their tensor-
    parallel splits (qkv, proj, fc1, fc2 and the two backward GEMMs of each), plus a K sweep
    and an M sweep at fixed width (the K ramp and wave quantization of gemm.h).
  - attention: torch's scaled_dot_product_attention, causal, forward and forward+backward
    TFLOP/s by head dim and sequence length, per backend (cuDNN, flash), counting the
    causal FLOPs the kernels execute (forward 2 x 2 b h T^2 hd / 2, backward 2.5 x that).
  - pointwise: an out-of-place add (read 2, write 1) and a copy, bytes/s by size.
Every measurement is guarded: an error is recorded under "errors" and the run goes on; a
deadline (--budget seconds after start, torch import included) skips what is left (in the
order GEMM, pointwise, attention); the file is rewritten after each section. Exit
status 0 whenever the JSON was written. The planner reads the file when a hardware profile
names it ([compute] measured_rates); see man/partrain-plan.1.
"""
import argparse
import json
import math
import os
import platform
import sys
import time

T0 = time.time()


def now():
    return time.time() - T0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--budget", type=float, default=45.0,
                    help="seconds after start (import included) to stop measuring; default 45")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run of the script)")
    args = ap.parse_args()
    result = {"schema": "partrain-gpu-rates/1", "host": platform.node(), "python": sys.version.split()[0],
              "started_unix": T0, "gemm": [], "attention": [], "pointwise": [], "errors": [], "skipped": []}

    def save():
        result["elapsed_s"] = round(now(), 2)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        os.replace(tmp, args.out)

    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - recorded, not raised
        result["errors"].append({"what": "import torch", "error": repr(e)})
        save()
        return 0
    result["torch"] = torch.__version__
    result["cuda"] = getattr(torch.version, "cuda", None)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        result["errors"].append({"what": "device", "error": "torch.cuda.is_available() is False"})
        save()
        return 0
    dev = torch.device(args.device)
    if cuda:
        p = torch.cuda.get_device_properties(0)
        result["device"] = {"name": p.name, "sm_count": p.multi_processor_count,
                            "memory_bytes": p.total_memory,
                            "capability": "%d.%d" % (p.major, p.minor),
                            "l2_bytes": getattr(p, "L2_cache_size", None)}
        try:
            result["device"]["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001
            pass
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        result["device"] = {"name": "cpu (dry run)"}

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(fn, min_s=0.02, max_reps=20):
        """Median seconds of fn() after a warm-up call; repeats until min_s or max_reps."""
        fn()
        sync()
        times = []
        total = 0.0
        while len(times) < 3 or (total < min_s and len(times) < max_reps):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                t = a.elapsed_time(b) / 1e3
            else:
                s = time.perf_counter()
                fn()
                t = time.perf_counter() - s
            times.append(t)
            total += t
        times.sort()
        return times[len(times) // 2], len(times)

    def over(section):
        if now() > args.budget:
            result["skipped"].append(section)
            return True
        return False

    small = not cuda  # a dry run on CPU: tiny shapes only
    # -- GEMM ------------------------------------------------------------------------------
    shapes = []
    if small:
        shapes = [(64, 96, 32, "dry"), (64, 32, 64, "dry")]
    else:
        for tokens in (4096, 16384):
            for C in (768, 1024, 2048, 4096, 8192, 12288, 16384):
                for tp in (1, 2, 4, 8):
                    if C // tp < 256 or (C <= 2048 and tp > 2) or (C >= 12288 and tp < 4 and tokens > 4096):
                        continue
                    F4 = 4 * C
                    # forward: qkv [n x 3C/t x C], proj [n x C x C/t], fc1 [n x 4C/t x C], fc2 [n x C x 4C/t]
                    for (n, k, what) in ((3 * C // tp, C, "qkv"), (C, C // tp, "proj"),
                                         (F4 // tp, C, "fc1"), (C, F4 // tp, "fc2")):
                        shapes.append((tokens, n, k, what))
                        if tokens == 16384 and tp in (1, 8):
                            shapes.append((tokens, k, n, what + ".dgrad"))   # input gradient
                            shapes.append((k, n, tokens, what + ".wgrad"))   # weight gradient
        for K in (128, 256, 512, 1024, 2048, 4096, 8192, 16384):
            shapes.append((8192, 8192, K, "k-sweep"))
        for M in (128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192):
            shapes.append((M, 8192, 8192, "m-sweep"))
    seen = set()
    biggest = max(max(m * k, k * n, m * n) for (m, n, k, _) in shapes)
    try:
        pool = torch.randn(biggest * 3 + 16, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    except Exception as e:  # noqa: BLE001
        pool = None
        result["errors"].append({"what": "gemm pool", "error": repr(e)})
    for (m, n, k, what) in shapes:
        if pool is None or over("gemm %dx%dx%d" % (m, n, k)):
            break
        if (m, n, k) in seen:
            continue
        seen.add((m, n, k))
        try:
            A = pool[:m * k].view(m, k)
            B = pool[m * k:m * k + k * n].view(k, n)
            Cm = pool[m * k + k * n:m * k + k * n + m * n].view(m, n)
            t, reps = timed(lambda: torch.mm(A, B, out=Cm))
            result["gemm"].append({"m": m, "n": n, "k": k, "what": what, "seconds": t, "reps": reps,
                                   "tflops": 2.0 * m * n * k / t / 1e12})
        except Exception as e:  # noqa: BLE001
            result["errors"].append({"what": "gemm %dx%dx%d" % (m, n, k), "error": repr(e)})
    del pool
    save()

    # -- pointwise -------------------------------------------------------------------------
    sizes = [1 << 16, 1 << 20] if small else [1 << p for p in (20, 22, 24, 26, 28, 30)]
    for nbytes in sizes:
        if over("pointwise %d" % nbytes):
            break
        try:
            dt = torch.bfloat16 if cuda else torch.float32
            n = nbytes // (2 if cuda else 4)
            x = torch.randn(n, device=dev, dtype=dt)
            y = torch.randn(n, device=dev, dtype=dt)
            z = torch.empty_like(x)
            t, _ = timed(lambda: torch.add(x, y, out=z))
            tc, _ = timed(lambda: z.copy_(x))
            result["pointwise"].append({"bytes_per_operand": nbytes, "add_seconds": t,
                                        "add_bytes_per_s": 3.0 * nbytes / t,
                                        "copy_seconds": tc, "copy_bytes_per_s": 2.0 * nbytes / tc})
            del x, y, z
        except Exception as e:  # noqa: BLE001
            result["errors"].append({"what": "pointwise %d" % nbytes, "error": repr(e)})
    save()
    # -- attention -------------------------------------------------------------------------
    backends = {}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    except Exception as e:  # noqa: BLE001
        result["errors"].append({"what": "torch.nn.attention", "error": repr(e)})
    tokens = 256 if small else 32768  # b x T per call
    grid = [(64, 128)] if small else [(hd, T) for hd in (64, 128) for T in (1024, 2048, 4096, 8192, 16384)]
    for name, backend in backends.items():
        for (hd, T) in grid:
            if over("attention %s hd%d T%d" % (name, hd, T)):
                break
            b = max(1, tokens // T)
            h = (2048 if not small else 128) // hd
            try:
                dt = torch.bfloat16 if cuda else torch.float32
                q, k_, v = (torch.randn(b, h, T, hd, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
                go = torch.randn(b, h, T, hd, device=dev, dtype=dt)

                def fwd():
                    with sdpa_kernel([backend]):
                        return F.scaled_dot_product_attention(q, k_, v, is_causal=True)

                def fwd_bwd():
                    out = fwd()
                    out.backward(go)
                    q.grad = k_.grad = v.grad = None

                tf, _ = timed(lambda: fwd())
                tfb, _ = timed(fwd_bwd)
                flops = 4.0 * b * h * T * T * hd / 2  # causal forward
                tb = max(tfb - tf, 1e-9)
                result["attention"].append({"backend": name, "b": b, "heads": h, "seq": T, "head_dim": hd,
                                            "causal": True, "forward_s": tf, "backward_s": tb,
                                            "forward_tflops": flops / tf / 1e12,
                                            "backward_tflops": 2.5 * flops / tb / 1e12,
                                            "total_tflops": 3.5 * flops / tfb / 1e12})
                del q, k_, v, go
            except Exception as e:  # noqa: BLE001
                result["errors"].append({"what": "attention %s hd%d T%d" % (name, hd, T), "error": repr(e)[:300]})
    save()

    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - never fail the command
        print("gpu_rates.py: %r" % (e,), file=sys.stderr)
        sys.exit(0)
