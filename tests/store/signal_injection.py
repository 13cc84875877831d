#!/usr/bin/env python3
"""Randomized signal injection into real runs (issue 22): SIGTERM, SIGKILL and SIGSTOP sent
to a random process (a rank's worker, or for SIGTERM every process at once as scancel does)
at a random step and a random instant inside it, across dp2, tp2, pp2 and dp2 x zero2 runs of
the demo job through `partrain run --nproc 2`. Each injected run must end by itself:

  SIGTERM   exit 75 with the stop step committed (the group stops at one step boundary);
  SIGKILL   exit 75 (the agent sees the death and aborts the group);
  SIGSTOP   exit 75 within the watchdog time, naming the stopped rank (no progress).

Then the same command runs to the end and its losses and grad norms must equal the
uninterrupted run's bit for bit. A run still alive BOUND seconds after the signal is a
hang (it is then continued and killed). Prints one line per injection and the counts:

  hangs past the watchdog time, SIGTERMs that left a committed stop checkpoint, resumes
  bit-identical.

Not a CI test (hundreds of runs); CI runs a handful (--count 8). Usage:

  python3 tests/store/signal_injection.py [--build build] [--count 200] [--seed N]
                                           [--watchdog 60] [--keep-going]
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LAYOUTS = ["dp2", "tp2", "pp2", "dp2,zero2"]
STEPS = 12
EVERY = 3


def trajectory(run_dir):
    """Per step: the loss and grad_norm text of metrics.jsonl (shortest round-trip text), as
    the run ended up with them: a restart marker drops the lines of the steps after it
    resumed at."""
    out = []
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                restart = re.search(r'"event":"restart","resumed_at_step":(\d+)', line)
                if restart:
                    del out[int(restart.group(1)):]
                    continue
                m = re.search(r'"step":(\d+),"loss":([^,]+),"lr":[^,]+,"grad_norm":([^,]+),', line)
                if m:
                    out.append((m.group(2), m.group(3)))
    except FileNotFoundError:
        pass
    return out


def may_end_normally(sig, log, at_most):
    """Whether a run that exited 0 after the signal may rightly have. Any signal: when every
    step was done before it was sent (the worker may be gone). SIGTERM: its flag is read once
    per step, at the gradient sync, and metrics.jsonl gets a step's line at its end. A signal
    sent with at_most lines there landed in step at_most + 1 or before; after that step's
    read, it stops the step after. So it can stop the last step (which then ends the run
    normally, and says so) from at_most = STEPS - 2 on, and from STEPS - 1 on it can also land
    after the last read, when the run ends without noticing it."""
    if at_most >= STEPS:
        return True
    said = "stop requested during the last step" in log
    return sig == "TERM" and ((at_most >= STEPS - 2 and said) or at_most >= STEPS - 1)


def write_job(src, work, name, watchdog):
    text = open(os.path.join(src, "etc/examples/tiny.toml")).read()
    text = text.replace('"data/', '"%s/etc/examples/data/' % src)  # every shipped shard it names
    text = text.replace("every = 0", "every = %d" % EVERY)
    path = os.path.join(work, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


class Runner:
    def __init__(self, args, work):
        self.cli = os.path.join(args.build, "bin/partrain")
        self.src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.work = work
        self.site = os.path.join(work, "site.toml")
        base = open(os.path.join(args.build, "etc/partrain.toml")).read()
        with open(self.site, "w") as f:
            f.write(base)
            if args.watchdog > 0:
                f.write("\n[agent]\nprogress_timeout = %d\n" % args.watchdog)
        self.job = write_job(self.src, work, "job", args.watchdog)

    def env(self, run_dir):
        e = dict(os.environ)
        e.update({"PARTRAIN_SITE_CONFIG": self.site, "PARTRAIN_RUN_DIR": run_dir, "OMP_NUM_THREADS": "1"})
        return e

    def start(self, spec, run_dir, steps=STEPS):
        err = open(run_dir + ".err", "w")
        return subprocess.Popen([self.cli, "run", self.job, "--steps", str(steps), "--partrain=" + spec,
                                 "--nproc", "2"], env=self.env(run_dir), stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)

    def run(self, spec, run_dir, bound=600):
        p = self.start(spec, run_dir)
        try:
            return p.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return -1


def worker_pids(log):
    return {int(r): int(p) for r, p in re.findall(r"rank (\d+) started: pid (\d+)", log)}


def kill_tree(pgid, pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--watchdog", type=int, default=20,
                    help="the site config's [agent] progress_timeout for these runs, s (0: leave it out)")
    ap.add_argument("--signals", default="TERM,KILL,STOP")
    ap.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sigs = args.signals.split(",")
    work = tempfile.mkdtemp(prefix="partrain_signals_")
    r = Runner(args, work)
    print("signal injection: %d runs, seed %d, watchdog %d s, in %s" % (args.count, args.seed, args.watchdog, work))
    refs = {}
    for spec in LAYOUTS:
        d = os.path.join(work, "ref_" + spec.replace(",", "_"))
        code = r.run(spec, d)
        refs[spec] = trajectory(d)
        if code != 0 or len(refs[spec]) != STEPS:
            print("reference %s failed (exit %s): %s" % (spec, code, open(d + ".err").read()[-2000:]))
            return 2
    bound = (args.watchdog if args.watchdog > 0 else 300) + 60
    counts = {"runs": 0, "hangs": 0, "term": 0, "term_committed": 0, "resumes": 0, "identical": 0, "exit75": 0}
    by_sig = {}
    failures = 0
    for i in range(args.count):
        spec = rng.choice(LAYOUTS)
        sig = rng.choice(sigs)
        target = rng.choice(["rank0", "rank1", "all"] if sig == "TERM" else ["rank0", "rank1"])
        step = rng.randint(1, STEPS - 2)
        frac = rng.random()
        run_dir = os.path.join(work, "run%d" % i)
        p = r.start(spec, run_dir)
        t0 = time.time()
        while len(trajectory(run_dir)) < step and p.poll() is None and time.time() - t0 < 120:
            time.sleep(0.01)
        # A random instant inside the next step: a fraction of the mean step time so far.
        done = len(trajectory(run_dir))
        per_step = (time.time() - t0) / max(done, 1)
        time.sleep(frac * min(per_step, 5.0))
        pids = worker_pids(open(run_dir + ".err").read())
        victims = [p.pid] + list(pids.values()) if target == "all" else [pids.get(int(target[-1]), 0)]
        at_step = len(trajectory(run_dir))
        for v in victims:
            if v > 0:
                try:
                    os.kill(v, getattr(signal, "SIG" + sig))
                except ProcessLookupError:
                    pass
        sent = time.time()
        # The steps done by the time the signal was surely delivered (an upper bound on the
        # step it landed in, as at_step is a lower bound: this process may be descheduled).
        at_most = len(trajectory(run_dir))
        try:
            code = p.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            code = None
        took = time.time() - sent
        log = open(run_dir + ".err").read()
        counts["runs"] += 1
        by_sig[sig] = by_sig.get(sig, 0) + 1
        ok = True
        note = ""
        if code is None:
            counts["hangs"] += 1
            kill_tree(p.pid, pids.values())
            p.wait()
            ok = False
            note = "HANG (still running %d s after the signal)" % bound
        else:
            counts["exit75"] += code == 75
            if code != 75 and not (code == 0 and may_end_normally(sig, log, at_most)):
                ok = False
                note = "exit %s (expected 75)" % code
        stopped = len(trajectory(run_dir))
        if sig == "TERM" and code is not None:
            counts["term"] += 1
            committed = "checkpoint of step %d committed" % stopped in log
            counts["term_committed"] += committed
            if not committed:
                ok = False
                note += " no committed stop checkpoint at step %d" % stopped
        if sig == "STOP" and code is not None and "no progress" not in log:
            note += " (ended without the watchdog's line)"
        # Resume to the end, bit-identical.
        for pid in pids.values():  # nothing of the old group may linger
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        rc = r.run(spec, run_dir)
        got = trajectory(run_dir)
        same = rc == 0 and got == refs[spec]
        counts["resumes"] += 1
        counts["identical"] += same
        if not same:
            ok = False
            note += " resume exit %s, %s" % (rc, "differs" if rc == 0 else "failed")
        resumed = re.findall(r"resum(?:e|ing) at step (\d+)", open(run_dir + ".err").read())
        print("%3d %-10s SIG%-4s -> %-5s at step %2d+%.2f: exit %-4s in %5.1f s, stopped at %2d, resumed at %-3s %s %s"
              % (i + 1, spec, sig, target, at_step, frac, code, took, stopped, resumed[-1] if resumed else "0",
                 "ok" if ok else "FAILED", note), flush=True)
        if not ok:
            failures += 1
            if not args.keep_going:
                print("  log: " + log[-3000:])
                break
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    print("signal injection: %d runs (%s); hangs past the watchdog time: %d; SIGTERMs that left a committed stop "
          "checkpoint: %d of %d; exit 75: %d; resumes bit-identical: %d of %d; failures %d"
          % (counts["runs"], ", ".join("%s %d" % kv for kv in sorted(by_sig.items())), counts["hangs"],
             counts["term_committed"], counts["term"], counts["exit75"], counts["identical"], counts["resumes"],
             failures))
    if failures == 0:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
