#!/usr/bin/env python3
"""Part B's summary (scripts/gpu-check/part-b.sh): the gpu tests case by case, and the
benchmark's runs side by side with the PyTorch peer. Standard library only.

    summarize.py --bench bench.json [--tests tests.log]

bench.json holds one JSON object per line: partrain_gpu_bench runs (label, mode, arch,
tokens_per_s, mfu, ...; "error" when a run failed; "phases_ms" lines), and torch_peer.py's
(label torch-ARCH). Prints, for each arch, every run's tokens/s, MFU, ms/step, losses, its
ratio to the first run of its mode (the baseline) and to the torch.compile peer; then the
per-phase tables.
"""
import argparse
import json
import re


def load(path):
    runs, phases = [], {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if "phases_ms" in obj:
                    phases[obj.get("label", "?")] = obj
                else:
                    runs.append(obj)
    except OSError:
        pass
    return runs, phases


def tests(path):
    """(case, verdict) from ctest -V output of the gpu tests (GoogleTest or the stand-in)."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = re.search(r"\[\s*(OK|FAILED|SKIPPED)\s*\] (\S+)", line)
                if m and "tests," not in line:
                    out.append((m.group(2), {"OK": "pass", "FAILED": "FAIL", "SKIPPED": "skip"}[m.group(1)]))
    except OSError:
        pass
    seen, uniq = set(), []
    for case, verdict in out:
        if case not in seen:
            seen.add(case)
            uniq.append((case, verdict))
    return uniq


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--tests", default="")
    a = p.parse_args()
    if a.tests:
        cases = tests(a.tests)
        failed = [c for c, v in cases if v == "FAIL"]
        print(f"gpu tests: {sum(v == 'pass' for _, v in cases)} passed, {len(failed)} failed, "
              f"{sum(v == 'skip' for _, v in cases)} skipped")
        for verdict, title in (("FAIL", "FAILED"), ("pass", "passed"), ("skip", "skipped")):
            names = [c for c, v in cases if v == verdict]
            if names:
                print(f"  {title}: " + ", ".join(names))
    runs, phases = load(a.bench)
    for arch in ("gpt2", "llama"):
        mine = [r for r in runs if r.get("arch") == arch]
        if not mine:
            continue
        peer = next((r for r in mine if r.get("label", "").startswith("torch") and "error" not in r), None)
        # Each mode's baseline: its run labelled *baseline*, else its first run.
        base = {}
        for r in mine:
            if "error" not in r and "baseline" in r.get("label", ""):
                base.setdefault(r.get("mode", "torch"), r)
        print(f"\n{arch}: tokens/s, MFU, ms/step, loss first -> last, x its mode's baseline, x torch.compile")
        for r in mine:
            label = r.get("label", "?")
            if "error" in r:
                print(f"  {label:34s} ERROR {r['error'][:300]}")
                continue
            mode = r.get("mode", "torch")
            base.setdefault(mode, r)
            tps = r.get("tokens_per_s", 0)
            xb = tps / base[mode]["tokens_per_s"] if base[mode].get("tokens_per_s") else 0
            xp = tps / peer["tokens_per_s"] if peer and peer.get("tokens_per_s") else 0
            graph = " graph" if r.get("graph") else ""
            gerr = f" (graph: {r['graph_error'][:120]})" if r.get("graph_error") else ""
            print(f"  {label:34s} {tps:>9.0f} {r.get('mfu', 0):6.1%} {r.get('ms_per_step', 0):8.2f} ms "
                  f"{r.get('loss_first', 0):.3f} -> {r.get('loss_last', 0):.3f}  x{xb:.2f}  x{xp:.2f}{graph}{gerr}")
        if peer is None:
            print("  (no torch.compile peer result for this arch)")
    for label, obj in phases.items():
        total = obj.get("phase_total_ms", 0) or 1
        print(f"\nphases of one step, {label} ({total:.2f} ms):")
        for name, ms in sorted(obj["phases_ms"].items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {ms:8.3f} ms {ms / total:6.1%}")


if __name__ == "__main__":
    main()
