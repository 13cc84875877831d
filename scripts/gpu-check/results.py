#!/usr/bin/env python3
"""Part A's records: loss comparisons, notes, and the summary (standard library only).

    results.py compare --record FILE --stage S --case C --ref REF_RUN --got GOT_RUN --steps N
                       --tol T [--tol-after STEP:T] [--seconds S] [--resumed-at STEP]
    results.py note    --record FILE --stage S --case C --status pass|fail|refused|skipped
                       --detail TEXT [--seconds S] [--json '{"extra": 1}']
    results.py summary --record FILE --txt summary.txt --json part-a.json [--header TEXT]

A record is one JSON object per line of FILE. A loss comparison reads each run's
metrics.jsonl as the run ended up (a restart marker drops the lines after its resume point,
engine/train/step_metrics.h) and checks |got - ref| <= tol x |ref| at every step; the
reference must really train (its last loss below its first).
"""
import argparse
import json
import os
import sys


def step_losses(run_dir):
    """{step: loss} of RUN_DIR/metrics.jsonl, and the step a restart marker resumed at."""
    losses, resumed = {}, None
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return losses, resumed
    with open(path) as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("event") == "restart":
                resumed = int(obj.get("resumed_at_step", 0))
                losses = {s: v for s, v in losses.items() if s <= resumed}
            elif "step" in obj and "loss" in obj:
                losses[int(obj["step"])] = float(obj["loss"])
    return losses, resumed


def append(path, rec):
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def compare(a):
    ref, _ = step_losses(a.ref)
    got, resumed = step_losses(a.got)
    after = None
    if a.tol_after:
        step, tol = a.tol_after.split(":")
        after = (int(step), float(tol))
    rec = {"stage": a.stage, "case": a.case, "steps": a.steps, "tol": a.tol}
    if a.seconds is not None:
        rec["seconds"] = round(a.seconds, 1)
    if after:
        rec["tol_after"] = {"step": after[0], "tol": after[1]}
    want = list(range(1, a.steps + 1))
    missing = [s for s in want if s not in ref or s not in got]
    if missing:
        rec.update(status="fail", detail=f"steps missing: reference has {len(ref)}, this run {len(got)} of {a.steps}")
    else:
        worst, worst_step, bad = 0.0, 0, []
        for s in want:
            tol = after[1] if after and s > after[0] else a.tol
            rel = abs(got[s] - ref[s]) / abs(ref[s])
            if rel > worst:
                worst, worst_step = rel, s
            if rel > tol:
                bad.append(f"step {s}: {got[s]:.7g} vs {ref[s]:.7g} (rel {rel:.1e})")
        trains = ref[a.steps] < ref[1]
        rec.update(worst_rel=float(f"{worst:.3g}"), worst_step=worst_step,
                   first_loss=ref[1], last_loss=ref[a.steps])
        if a.resumed_at is not None and resumed != a.resumed_at:
            rec.update(status="fail", detail=f"resumed at step {resumed}, not {a.resumed_at}")
        elif bad:
            rec.update(status="fail", detail="; ".join(bad[:3]))
        elif not trains:
            rec.update(status="fail", detail=f"the reference does not train: {ref[1]:.5g} -> {ref[a.steps]:.5g}")
        else:
            where = f"worst rel {worst:.1e} at step {worst_step}" if worst > 0 else "bit-identical"
            rec.update(status="pass", detail=f"{where} (tol {a.tol:g}"
                       + (f", {after[1]:g} after step {after[0]}" if after else "") + f") over {a.steps} steps")
    append(a.record, rec)
    print(f"{rec['status']}: {a.stage} {a.case}: {rec['detail']}")


def note(a):
    rec = {"stage": a.stage, "case": a.case, "status": a.status, "detail": a.detail}
    if a.seconds is not None:
        rec["seconds"] = round(a.seconds, 1)
    if a.json:
        rec.update(json.loads(a.json))
    append(a.record, rec)
    print(f"{a.status}: {a.stage} {a.case}: {a.detail}")


def summary(a):
    recs = []
    if os.path.exists(a.record):
        with open(a.record) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    counts = {}
    for r in recs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [a.header] if a.header else []
    for r in recs:
        secs = f" [{r['seconds']:.0f} s]" if "seconds" in r else ""
        lines.append(f"{r['status'].upper():8} {r['stage']:10} {r['case']:22} {r['detail']}{secs}")
    lines.append("part A: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) if counts else "part A: no result")
    with open(a.txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.json, "w") as f:
        json.dump({"counts": counts, "results": recs}, f, indent=1, sort_keys=True)
        f.write("\n")
    print("\n".join(lines))
    return 1 if counts.get("fail") else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("compare")
    n = sub.add_parser("note")
    s = sub.add_parser("summary")
    for p in (c, n, s):
        p.add_argument("--record", required=True)
    for p in (c, n):
        p.add_argument("--stage", required=True)
        p.add_argument("--case", required=True)
        p.add_argument("--seconds", type=float)
    c.add_argument("--ref", required=True)
    c.add_argument("--got", required=True)
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--tol", type=float, required=True)
    c.add_argument("--tol-after")
    c.add_argument("--resumed-at", type=int)
    n.add_argument("--status", required=True, choices=["pass", "fail", "refused", "skipped"])
    n.add_argument("--detail", required=True)
    n.add_argument("--json")
    s.add_argument("--txt", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--header")
    a = ap.parse_args()
    if a.what == "compare":
        compare(a)
    elif a.what == "note":
        note(a)
    else:
        sys.exit(summary(a))


if __name__ == "__main__":
    main()
