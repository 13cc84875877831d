"""Running partrain's commands from the reference checks: stdout, or the command, its output
and exit 1 when it fails."""
import subprocess
import sys


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print("FAIL:", " ".join(cmd), "\n", r.stdout, r.stderr)
        sys.exit(1)
    return r.stdout
