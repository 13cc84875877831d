"""Compares the PARTRAIN_* environment each task recorded with `partrain layout --json`.

usage: check_rank_env.py PARTRAIN_BINARY DIR
DIR holds one file per task and step, STEP.PROCID, of KEY=VALUE lines (see
rank_env_test.sh). The expected layout comes from the `partrain` command, an independent
consumer of the layout core (the plugin computes its values inside slurmstepd from
Slurm's environment); node names and local ids come from Slurm itself.
"""
import json
import os
import subprocess
import sys

NVLINK_DOMAIN = 4  # the cluster's plugstack nvlink_domain=4
GPUS = 4


def load(directory, step):
    tasks = {}
    for name in os.listdir(directory):
        if name.startswith(step + "."):
            with open(os.path.join(directory, name)) as f:
                env = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
            tasks[int(env["SLURM_PROCID"])] = env
    return tasks


def layout(partrain, spec, nodelist, distribution):
    cmd = [partrain, "layout", "--partrain=" + spec, "--nodelist", nodelist,
           "--gpus-per-node", str(GPUS), "--nvlink-domain", str(NVLINK_DOMAIN),
           "--distribution", distribution, "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def check_per_rank(tasks, want, spec, step):
    expect(len(tasks) == want["world"], f"{step}: {len(tasks)} tasks, layout has {want['world']}")
    by_task = {r["task"]: r for r in want["ranks"]}
    for procid, env in sorted(tasks.items()):
        r = by_task[procid]
        where = f"{step} task {procid} on {env['SLURMD_NODENAME']}"
        expect(r["node"] == env["SLURMD_NODENAME"], f"{where}: layout puts it on {r['node']}")
        expect(r["local"] == int(env["SLURM_LOCALID"]), f"{where}: local id differs")
        got = {k: int(env[f"PARTRAIN_{k.upper()}_RANK"]) for k in ("tp", "pp", "dp", "ep", "cp")}
        got["rank"] = int(env["PARTRAIN_RANK"])
        for k, v in got.items():
            expect(v == r[k], f"{where}: PARTRAIN {k} {v}, layout says {r[k]}")
        for k in ("world", "tp", "pp", "dp", "ep", "cp"):
            expect(int(env[f"PARTRAIN_{k.upper()}"]) == want[k], f"{where}: PARTRAIN_{k.upper()}")
        expect(env["PARTRAIN_SPEC"] == spec, f"{where}: PARTRAIN_SPEC {env['PARTRAIN_SPEC']}")
        expect(int(env["PARTRAIN_LOCAL_DEVICE"]) == r["local"], f"{where}: local device")
        node_ranks = [x["rank"] for x in sorted(want["ranks"], key=lambda x: x["local"])
                      if x["node"] == r["node"]]
        expect(env["PARTRAIN_NODE_RANKS"] == ",".join(map(str, node_ranks)),
               f"{where}: PARTRAIN_NODE_RANKS {env['PARTRAIN_NODE_RANKS']} != {node_ranks}")
    # TP groups lie inside one node: same (pp, dp, cp) coordinates -> one node.
    nodes_of_group = {}
    for env in tasks.values():
        key = (env["PARTRAIN_PP_RANK"], env["PARTRAIN_DP_RANK"], env["PARTRAIN_CP_RANK"])
        nodes_of_group.setdefault(key, set()).add(env["SLURMD_NODENAME"])
    for key, nodes in nodes_of_group.items():
        expect(len(nodes) == 1, f"{step}: TP group (pp, dp, cp) = {key} spans nodes {nodes}")
    node_of_rank = {r["rank"]: r["node"] for r in want["ranks"]}
    for group in want["groups"]["tp"]:
        expect(len({node_of_rank[x] for x in group}) == 1,
               f"{step}: layout TP group {group} spans nodes")


def check_common(tasks, step):
    first = next(iter(tasks.values()))
    job_dir = first["PARTRAIN_STATE_DIR"]
    secret = first["PARTRAIN_JOB_SECRET_FILE"]
    for env in tasks.values():
        for k in ("PARTRAIN_COORDINATOR", "PARTRAIN_STATE_DIR", "PARTRAIN_JOB_SECRET_FILE"):
            expect(env[k] == first[k], f"{step}: {k} differs between tasks")
    expect(os.path.basename(job_dir) == "slurm-" + first["SLURM_JOB_ID"],
           f"{step}: state dir {job_dir} is not <state_root>/slurm-<job id>")
    expect(secret == job_dir + "/job.secret", f"{step}: secret not in the state dir")
    for env in tasks.values():
        expect(env.get("SECRET_MODE") == "600", f"{step}: {secret} had mode {env.get('SECRET_MODE')} in a task")
    expect(not os.path.exists(secret), f"{step}: {secret} is still there after the job's epilog")
    host, port = first["PARTRAIN_COORDINATOR"].rsplit(":", 1)
    # Port 0: the coordinator binds any free port and publishes it in the state directory.
    expect(host == "n1" and port == "0", f"{step}: coordinator {host}:{port}")


def main():
    partrain, directory = sys.argv[1], sys.argv[2]
    nodelist = None
    for step, spec, dist in (("block", "tp2,pp2", "block"), ("cyclic", "tp2,pp2", "cyclic"),
                             ("override", "tp4", "block")):
        tasks = load(directory, step)
        expect(tasks, f"{step}: no task recorded its environment")
        nodelist = next(iter(tasks.values()))["SLURM_STEP_NODELIST"]
        want = layout(partrain, spec, nodelist, dist)
        check_per_rank(tasks, want, spec, step)
        check_common(tasks, step)
        print(f"ok: {step}: {len(tasks)} tasks match partrain layout --partrain={spec} "
              f"--distribution {dist}; TP groups node-local")
    # One agent per node: no rank of its own, the node's ranks in PARTRAIN_NODE_RANKS.
    tasks = load(directory, "agent")
    expect(len(tasks) == 2, f"agent: {len(tasks)} tasks, want 2")
    want = layout(partrain, "tp2,pp2", nodelist, "block")
    for env in tasks.values():
        node = env["SLURMD_NODENAME"]
        ranks = [r["rank"] for r in sorted(want["ranks"], key=lambda x: x["local"])
                 if r["node"] == node]
        expect(env["PARTRAIN_NODE_RANKS"] == ",".join(map(str, ranks)),
               f"agent on {node}: PARTRAIN_NODE_RANKS {env['PARTRAIN_NODE_RANKS']} != {ranks}")
        expect("PARTRAIN_RANK" not in env, f"agent on {node}: has PARTRAIN_RANK")
        expect(int(env["PARTRAIN_WORLD"]) == 8, f"agent on {node}: world")
    check_common(tasks, "agent")
    print("ok: agent: one task per node runs that node's ranks of the 8-rank layout")


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, KeyError, subprocess.CalledProcessError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
