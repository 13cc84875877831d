#!/usr/bin/python3
"""The peer of rendezvous_bench: PyTorch's TCPStore (what torchrun's c10d rendezvous and
init_process_group("env://") use), with the same work per rank on loopback:

    connect, SET addr/<r>, barrier of N (ADD count; the last one SETs go; WAIT go),
    GET addr/<r+1 mod N>

Ranks are threads (TCPStore's client blocks), 1024 per process. Prints one line per rank
count in rendezvous_bench's format. Bounded: 60 s per scale.

    /usr/bin/python3 tcpstore_peer.py [N...]      default: 1024 4096
"""
import datetime
import multiprocessing as mp
import os
import resource
import sys
import threading
import time

import torch.distributed as dist

PER_PROCESS = 1024
LIMIT = 60


def raise_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server(port_out, world):
    raise_files()
    store = dist.TCPStore("127.0.0.1", 0, world + 1, True, datetime.timedelta(seconds=LIMIT),
                          wait_for_workers=False)
    port_out.put(store.port)
    time.sleep(3600)


def rank(port, r, world, errors):
    try:
        s = dist.TCPStore("127.0.0.1", port, world + 1, False, datetime.timedelta(seconds=LIMIT))
        s.set(f"addr/{r}", f"10.0.0.1:{20000 + r}")
        if s.add("count", 1) == world:
            s.set("go", "1")
        s.wait(["go"])
        s.get(f"addr/{(r + 1) % world}")
    except Exception as e:  # noqa: BLE001 - counted, not raised, so one failure is reported once
        errors.append(str(e))


def driver(port, first, count, world, status):
    raise_files()
    threading.stack_size(256 * 1024)
    errors = []
    threads = [threading.Thread(target=rank, args=(port, r, world, errors)) for r in range(first, first + count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status.put(len(errors))


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return line.split()[1]
    return "?"


def run(world):
    q = mp.Queue()
    srv = mp.Process(target=server, args=(q, world), daemon=True)
    srv.start()
    port = q.get()
    status = mp.Queue()
    t0 = time.monotonic()
    drivers = [mp.Process(target=driver, args=(port, f, min(PER_PROCESS, world - f), world, status))
               for f in range(0, world, PER_PROCESS)]
    for d in drivers:
        d.start()
    failed = 0
    for d in drivers:
        d.join(LIMIT + 10)
        if d.is_alive():
            d.kill()
            failed += 1
    secs = time.monotonic() - t0
    while not status.empty():
        failed += status.get()
    threads = threads_of(srv.pid)
    srv.kill()
    if failed:
        print(f"{world:7d} ranks: FAILED ({failed} ranks or drivers did not finish within {LIMIT} s)")
        return False
    print(f"{world:7d} ranks: {secs:7.3f} s  {1e6 * secs / world:7.1f} us/rank  server threads {threads}")
    sys.stdout.flush()
    return True


def main():
    scales = [int(a) for a in sys.argv[1:]] or [1024, 4096]
    print(f"TCPStore (torch {dist.__name__.split('.')[0]} {__import__('torch').__version__}): same work per rank, "
          f"loopback, {PER_PROCESS} ranks (threads) per process")
    ok = all([run(n) for n in scales])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
