#!/usr/bin/python3
"""Compares a run's metrics.jsonl with a reference run's, step by step.

    compare_metrics.py REFERENCE GOT [--last N] [--first-from]

Every step of GOT must have the reference's line for the same step, with equal values of
every field that does not measure time or speed (loss, lr, grad_norm, tokens, dp,
collectives, peak_mib; val_loss where both evaluated, as a run also evaluates at its own
last step): the runs are deterministic, so equal means equal, not close. GOT's
steps, after its restart markers (a resumed run's lines replace those a crash left), must
follow each other without a gap. --last N: GOT must end at step N. Prints one line saying
what matched.
"""
import json
import sys

def is_timing(key):
    """Fields that measure time or a rate (step_ms, exposed_share, tokens_per_s, mfu, the
    wall-clock time, ...)."""
    return key in ("mfu", "time") or key.endswith(("_ms", "_share", "_per_s", "_per_rank", "_mb_s"))


def load(path, restarts=None):
    """The step rows as the run ended up with them: a restart marker
    {"event":"restart","resumed_at_step":N} replaces the rows of steps after N before it.
    `restarts` (a list) collects the markers."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                sys.exit(f"{path}:{n}: not JSON ({e}): {line[:80]}")
            if row.get("event") == "restart":
                rows = [r for r in rows if r["step"] <= row["resumed_at_step"]]
                if restarts is not None:
                    restarts.append(row)
                continue
            rows.append(row)
    return rows


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--last"):
        sys.exit(__doc__)
    ref = {r["step"]: r for r in load(argv[1])}
    got = load(argv[2])
    if not got:
        sys.exit(f"{argv[2]}: no steps")
    steps = [r["step"] for r in got]
    if steps != list(range(steps[0], steps[0] + len(steps))):
        sys.exit(f"{argv[2]}: steps do not follow each other: {steps[:5]}...{steps[-5:]}")
    if len(argv) == 5 and steps[-1] != int(argv[4]):
        sys.exit(f"{argv[2]}: ends at step {steps[-1]}, not {argv[4]}")
    for r in got:
        want = ref.get(r["step"])
        if want is None:
            sys.exit(f"{argv[2]}: step {r['step']} is not in the reference {argv[1]}")
        keys = {k for k in set(r) | set(want) if not is_timing(k)}
        # val_loss is an evaluation, not the trajectory: a run evaluates at its own last step
        # (--steps), which the reference may run past; where both evaluated, they must agree.
        if ("val_loss" in r) != ("val_loss" in want):
            keys.discard("val_loss")
        diff = [k for k in sorted(keys) if r.get(k) != want.get(k)]
        if diff:
            detail = ", ".join(f"{k} {r.get(k)!r} vs {want.get(k)!r}" for k in diff)
            sys.exit(f"{argv[2]}: step {r['step']} differs from the reference: {detail}")
    last = got[-1]
    print(f"steps {steps[0]}..{steps[-1]} equal the reference "
          f"(final loss {last['loss']!r}, grad_norm {last['grad_norm']!r})")


if __name__ == "__main__":
    main(sys.argv)
