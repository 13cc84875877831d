"""The peer of partrain_allreduce_bench: torch.distributed's all_reduce with the gloo
backend on loopback, WORLD processes, float32 sums of 1 MiB and 64 MiB, the mean time of
50 and 5 iterations after a warm-up and a barrier, printed by rank 0 in the same form:

    all_reduce BYTES WORLD MS

Usage: gloo_peer.py [WORLD]     (Debian's python3-torch: /usr/bin/python3)
"""
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for nbytes, iters in ((1 << 20, 50), (64 << 20, 5)):
        data = torch.ones(nbytes // 4, dtype=torch.float32)
        dist.all_reduce(data)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        ms = (time.perf_counter() - start) / iters * 1e3
        if rank == 0:
            print(f"all_reduce {nbytes} {world} {ms:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(1)
    with socket.socket() as s:  # a free port for the TCP store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(world, port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
