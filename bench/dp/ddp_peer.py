#!/usr/bin/python3
"""The PyTorch peer of bench/dp/dp_vs_ddp.sh: DistributedDataParallel with the gloo backend
on `--nproc` CPU processes, the GPT-2 style model of bench/torch_peer.py, each rank a
`--batch`-sequence slice of the global batch, AdamW with clipping. Each rank runs one
thread. Step time is the median after warm-up; the exposed-communication share is
1 - t(no_sync) / t(sync): the part of a synchronised step that the all-reduce adds.

    ddp_peer.py --layers L --hidden C --heads H --seq T --batch B --vocab V
                --steps S --warmup W --nproc N
Prints: "tokens_per_s X exposed_share Y" (tokens of the global batch per second).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_peer import GPT  # noqa: E402  the same model as the single-rank peer


def timed_steps(model, opt, idx, tgt, n, sync):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if sync:
            loss = model(idx, tgt)
            loss.backward()
        else:
            with model.no_sync():
                loss = model(idx, tgt)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    return times


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(0)
    net = GPT(a.vocab, a.seq, a.layers, a.hidden, a.heads)
    # The causal masks are bool buffers, which gloo cannot broadcast; they are constants.
    DDP._set_params_and_buffers_to_ignore_for_model(
        net, [n for n, _ in net.named_buffers() if n.endswith("mask")])
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    measure(timed_steps, model, opt, a, rank, out, "cpu")


def measure(timed, model, opt, a, rank, out, device):
    """Warm-up, then a.steps synchronised and a.steps no_sync steps (`timed`); rank 0 puts
    (tokens/s of the global batch, exposed share) into out. Ends the process group."""
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    timed(model, opt, idx, tgt, a.warmup, True)
    sync = sorted(timed(model, opt, idx, tgt, a.steps, True))
    nosync = sorted(timed(model, opt, idx, tgt, a.steps, False))
    if rank == 0:
        ms, mn = sync[len(sync) // 2], nosync[len(nosync) // 2]
        out.put((a.batch * a.nproc * a.seq / ms, max(0.0, 1 - mn / ms)))
    dist.destroy_process_group()


def parse_args():
    ap = argparse.ArgumentParser()
    for k in ("layers", "hidden", "heads", "seq", "batch", "vocab", "steps", "warmup", "nproc"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--port", type=int, default=29533)
    return ap.parse_args()


def launch(worker, a, name):
    """Runs worker(rank, a, port, queue) in a.nproc spawned processes; prints rank 0's result."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, q)) for r in range(a.nproc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(f"{name}: a rank failed (see above)")
    tok_s, share = q.get(timeout=10)
    print(f"tokens_per_s {tok_s:.1f} exposed_share {share:.3f}")


def main():
    launch(worker, parse_args(), "ddp_peer")


if __name__ == "__main__":
    main()
