#!/usr/bin/python3
"""The PyTorch peer of bench/dp/dp_gpu_vs_ddp.sh: DistributedDataParallel with the nccl
backend on `--nproc` GPUs (one process each), the GPT-2 style model of bench/torch_peer.py
under bf16 autocast (fp32 parameters and AdamW, bf16 matmuls and activations, as partrain's
CUDA backend keeps fp32 master weights and trains in bf16), each rank a `--batch`-sequence
slice of the global batch, AdamW with clipping. Step time is the median after warm-up, each
step ended by a device synchronisation; the exposed-communication share is
1 - t(no_sync) / t(sync), the part of a synchronised step the all-reduce adds.

    ddp_gpu_peer.py --layers L --hidden C --heads H --seq T --batch B --vocab V
                    --steps S --warmup W --nproc N
Prints: "tokens_per_s X exposed_share Y" (tokens of the global batch per second).
Exits 2 with one line when this PyTorch has no CUDA, no NCCL, or fewer than N GPUs.
"""
import argparse
import contextlib
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_peer import GPT  # noqa: E402  the same model as the CPU peers


def timed_steps(model, opt, idx, tgt, n, sync):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else model.no_sync():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, tgt)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    return times


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=a.nproc)
    torch.manual_seed(0)
    net = GPT(a.vocab, a.seq, a.layers, a.hidden, a.heads).cuda()
    model = DDP(net, device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).cuda()
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).cuda()
    timed_steps(model, opt, idx, tgt, a.warmup, True)
    sync = sorted(timed_steps(model, opt, idx, tgt, a.steps, True))
    nosync = sorted(timed_steps(model, opt, idx, tgt, a.steps, False))
    if rank == 0:
        ms, mn = sync[len(sync) // 2], nosync[len(nosync) // 2]
        out.put((a.batch * a.nproc * a.seq / ms, max(0.0, 1 - mn / ms)))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    for k in ("layers", "hidden", "heads", "seq", "batch", "vocab", "steps", "warmup", "nproc"):
        ap.add_argument("--" + k, type=int, required=True)
    a = ap.parse_args()
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print(f"ddp_gpu_peer: this PyTorch ({torch.__version__}, {sys.executable}) has no CUDA or no NCCL; "
              "install a CUDA build of torch and name its python in PARTRAIN_TORCH_PYTHON", file=sys.stderr)
        sys.exit(2)
    if torch.cuda.device_count() < a.nproc:
        print(f"ddp_gpu_peer: --nproc {a.nproc} needs {a.nproc} GPUs, PyTorch sees {torch.cuda.device_count()}",
              file=sys.stderr)
        sys.exit(2)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a, port, q)) for r in range(a.nproc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit("ddp_gpu_peer: a rank failed (see above)")
    tok_s, share = q.get(timeout=10)
    print(f"tokens_per_s {tok_s:.1f} exposed_share {share:.3f}")


if __name__ == "__main__":
    main()
