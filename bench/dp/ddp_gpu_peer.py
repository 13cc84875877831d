#!/usr/bin/python3
"""The PyTorch peer of bench/dp/dp_gpu_vs_ddp.sh: DistributedDataParallel with the nccl
backend on `--nproc` GPUs (one process each), the GPT-2 style model of bench/torch_peer.py
under bf16 autocast (fp32 parameters and AdamW, bf16 matmuls and activations, as partrain's
CUDA backend keeps fp32 master weights and trains in bf16), each rank a `--batch`-sequence
slice of the global batch, AdamW with clipping. Step time is the median after warm-up, each
step ended by a device synchronisation; the exposed-communication share is
1 - t(no_sync) / t(sync), the part of a synchronised step the all-reduce adds.

    ddp_gpu_peer.py --layers L --hidden C --heads H --seq T --batch B --vocab V
                    --steps S --warmup W --nproc N [--port P]
Prints: "tokens_per_s X exposed_share Y" (tokens of the global batch per second).
Exits 2 with one line when this PyTorch has no CUDA, no NCCL, or fewer than N GPUs.
"""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_peer import launch, measure, parse_args  # noqa: E402  the CPU peer's harness
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
    measure(timed_steps, model, opt, a, rank, out, torch.device("cuda", rank))


def main():
    a = parse_args()
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print(f"ddp_gpu_peer: this PyTorch ({torch.__version__}, {sys.executable}) has no CUDA or no NCCL; "
              "install a CUDA build of torch and name its python in PARTRAIN_TORCH_PYTHON", file=sys.stderr)
        sys.exit(2)
    if torch.cuda.device_count() < a.nproc:
        print(f"ddp_gpu_peer: --nproc {a.nproc} needs {a.nproc} GPUs, PyTorch sees {torch.cuda.device_count()}",
              file=sys.stderr)
        sys.exit(2)
    launch(worker, a, "ddp_gpu_peer")


if __name__ == "__main__":
    main()
