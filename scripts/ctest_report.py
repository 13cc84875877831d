#!/usr/bin/env python3
"""What a ctest run in BUILD_DIR did, from the JUnit file it wrote (ctest --output-junit):
the slowest tests with their times, the sum of all test times, and every skipped test with
its reason. With --no-skips (CI) it exits 1 when a test skipped that this machine should
run (every label but gpu: a missing torch, npm package or Slurm daemon fails CI instead of
passing unnoticed), and when a test named by --require is not registered at all (the
slurm cluster tests are left out when Slurm's daemons were not found at configure time).

    scripts/ctest_report.py BUILD_DIR [--junit FILE] [--no-skips] [--require TEST]... [--top N]
"""
import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

# Tests that may skip anywhere: they need a CUDA device, which CI machines do not have.
MAY_SKIP_LABELS = {"gpu"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--junit", help="the JUnit file (default BUILD/ctest-junit.xml)")
    ap.add_argument("--no-skips", action="store_true")
    ap.add_argument("--require", action="append", default=[])
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    junit = args.junit or f"{args.build}/ctest-junit.xml"
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        sys.exit(f"ctest_report: cannot read {junit} ({e}); run ctest with --output-junit {junit}")
    listing = json.loads(subprocess.run(["ctest", "--test-dir", args.build, "--show-only=json-v1"],
                                        check=True, capture_output=True, text=True).stdout)
    labels = {}
    for t in listing["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels[t["name"]] = set(props.get("LABELS", []))

    times, skipped = [], []
    for c in cases:
        name = c.get("name")
        times.append((float(c.get("time") or 0), name))
        if c.get("status") in ("notrun", "disabled"):
            out = (c.findtext("system-out") or "").strip().splitlines()
            reason = next((l for l in reversed(out) if "skip" in l.lower()), out[-1] if out else "")
            skipped.append((name, c.find("skipped").get("message") if c.find("skipped") is not None else "",
                            reason.strip()))
    times.sort(reverse=True)
    print(f"ctest: {len(times)} tests, {sum(t for t, _ in times):.0f} s of test time in all; the slowest:")
    for t, name in times[:args.top]:
        print(f"  {t:8.1f} s  {name}  [{','.join(sorted(labels.get(name, ())))}]")
    bad = []
    for name, why, reason in skipped:
        allowed = labels.get(name, set()) & MAY_SKIP_LABELS
        print(f"skipped: {name} ({why}) {reason}" + ("" if allowed else "  <- should run here"))
        if not allowed:
            bad.append(name)
    missing = [r for r in args.require if r not in labels]
    for r in missing:
        print(f"not registered: {r} (configure found what it needs missing; see cmake's output)")
    if args.no_skips and (bad or missing):
        print(f"ctest_report: {len(bad)} test(s) skipped and {len(missing)} not registered that this machine "
              "should run: install what they name (scripts/install-deps.sh) and run again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
