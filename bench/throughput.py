"""Training throughput and CPU cost of the demo model (MLP 784-1024-1024-10, global batch 256, SGD
momentum), side by side in one run:
  (a) dapple, one process, no pipeline (dapple-reference: the whole batch at once)
  (b) dapple through a real coordinator and 2 worker processes over UCX, micro-batch 32 (M = 8):
      one stage (one worker computes, the other idles: one process with the same M), and two
      stages with schedules dapple and gpipe
  (c) PyTorch (Debian's python3-torch), one process, one thread (bench/peer_env.py)
For each: samples/s (wall) and CPU ms per step. dapple-reference and PyTorch time their own steps
(process CPU time); a cluster job's CPU time is the workers' (utime + stime of both worker
processes from /proc, every thread) in the job's steady state: read while it runs, from step
STEPS / 5 to its last step but one, over the steps between, so that what a job costs once (start,
plan, model build, connections, the evaluation at the end) stays out. A 2-stage warm-up job runs
first (the model's profile, the workers' copies of the dataset, their first seconds' host
measurements). Every configuration runs REPEATS times, interleaved; the
table shows the best of them (the highest samples/s, the lowest CPU time: on a machine shared
with other work, interference only ever adds). The last lines compare dapple with PyTorch and the
2-stage pipeline's summed CPU time with the one-stage job's (the same M).
This machine gives about one core of compute, so (b)'s two stages share it: compare ratios.
Usage: /usr/bin/python3 bench/throughput.py [STEPS [REPEATS]]    (default 300 steps, 3 repeats;
after scripts/setup; needs python3-torch)
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_env  # noqa: E402

peer_env.reexec_in_peer_env()

sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
WARM_UP_STEPS = 20
POLL_S = 0.2  # how often a cluster job's progress is read (a dapplectl call: ~18 ms of CPU)
MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0), ("linear", 10)]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def single_process():
    """(samples/s, CPU ms per step) of dapple-reference."""
    d = tempfile.mkdtemp()
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write(cluster.spec_yaml("bench-ref", MLP, 256, 256, 1, max_steps=STEPS))
    out = subprocess.run([cluster.REFERENCE, spec, str(STEPS), d], check=True, capture_output=True,
                         text=True, timeout=600).stdout
    return (float(re.search(r"samples_per_second ([0-9.]+)", out).group(1)),
            float(re.search(r"step_cpu_ms ([0-9.]+)", out).group(1)))


def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5)


def workers_cpu_seconds(c):
    return sum(cpu_seconds(p.pid) for _, p in c.workers)


def cluster_job(c, stages, schedule):
    """(the coordinator's samples/s, the workers' CPU ms per step) of a job of STEPS steps. The CPU
    is read in the job's steady state: at the first poll that sees step >= STEPS / 5 and at the
    last one before the job's last step, divided by the steps between the two readings (the job
    reports every step), so that what a job costs once (its start, plan, model build, the
    connections, the evaluation after its last step) stays out."""
    job = c.submit(cluster.spec_yaml("bench-p%d-%s" % (stages, schedule), MLP, 256, 32, stages,
                                     schedule=schedule, max_steps=STEPS))
    first = last = None
    deadline = time.time() + 900
    while time.time() < deadline:
        j = c.get(job)
        # Read right after the step it goes with; the poll itself (dapplectl) runs in another
        # process, outside the workers' CPU.
        cpu = workers_cpu_seconds(c)
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        step = int(j.get("metrics", {}).get("step", 0))
        # Not the last step: its end overlaps the evaluation after it.
        if STEPS // 5 <= step < STEPS - 1:
            if first is None:
                first = (step, cpu)
            elif step > first[0]:
                last = (step, cpu)
        time.sleep(POLL_S)
    assert j["state"] == "SUCCEEDED", j
    assert last is not None, "no two readings in the job's steady state: run more steps"
    return (j["metrics"]["samples_per_second"],
            1e3 * (last[1] - first[1]) / (last[0] - first[0]))


def torch_peer():
    """(samples/s, CPU ms per step) of the same model, batch and optimizer in PyTorch."""
    code = r"""
import time, torch, torch.nn as nn
torch.set_num_threads(1); torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(256, 784); y = torch.randint(0, 10, (256,))
def step():
    opt.zero_grad(set_to_none=True); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
for _ in range(5): step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(%d): step()
print(%d * 256 / (time.perf_counter() - t0), 1e3 * (time.process_time() - c0) / %d)
""" % (STEPS, STEPS, STEPS)
    try:
        out = subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True,
                             text=True, timeout=600, env=peer_env.peer_env()).stdout
        samples_per_second, cpu_ms = out.split()
        return float(samples_per_second), float(cpu_ms)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("torch peer unavailable (install python3-torch): %s" % e, file=sys.stderr)
        return None


def warm_up(c):
    """Runs what the first jobs of the bench would otherwise pay for inside a measurement: the
    model's profile (measured by a worker when the first job of the model is submitted), each
    worker's copy of the dataset (kept between jobs), and the workers' idle measurements of
    the host in their first seconds (worker_daemon.cc kCapacityRefinements, up to 10 s after
    the start: about 1.5 s of CPU each time, which landed in whichever job was being measured
    and made the 1-stage job's CPU per step read 26-28 ms in the first repeat, 40-42 in the
    others)."""
    start = time.time()
    job = c.submit(cluster.spec_yaml("bench-warm-up", MLP, 256, 32, 2, max_steps=WARM_UP_STEPS))
    j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=900)
    assert j["state"] == "SUCCEEDED", j.get("message")
    time.sleep(max(0.0, 12 - (time.time() - start)))


def best(runs):
    """The highest samples/s and the lowest CPU ms per step of (samples/s, CPU ms) pairs."""
    return max(r[0] for r in runs), min(r[1] for r in runs)


def median_cpu(runs):
    return statistics.median(r[1] for r in runs)


def main():
    names = ["dapple, 1 process, no pipeline (dapple-reference)",
             "dapple, 1 stage x 1 process, M=8 (workers' CPU)",
             "dapple, 2 stages x 1 process, schedule dapple, M=8 (workers' CPU)",
             "dapple, 2 stages x 1 process, schedule gpipe, M=8 (workers' CPU)",
             "PyTorch 1.13, 1 process, 1 thread"]
    runs = [[] for _ in names]
    c = cluster.Cluster(workers=2)
    try:
        c.wait_workers(2)
        warm_up(c)
        for _ in range(REPEATS):
            runs[0].append(single_process())
            runs[1].append(cluster_job(c, 1, "dapple"))
            runs[2].append(cluster_job(c, 2, "dapple"))
            runs[3].append(cluster_job(c, 2, "gpipe"))
            t = torch_peer()
            if t is not None:
                runs[4].append(t)
    finally:
        c.close()
    rows = [(name, best(r)) for name, r in zip(names, runs) if r]
    t = rows[4][1] if len(rows) > 4 else None
    base_sps, base_cpu = rows[0][1]
    print("| configuration | samples/s | CPU ms/step | samples/s vs dapple 1 process |")
    print("|---|---:|---:|---:|")
    for name, (sps, cpu_ms) in rows:
        print("| %s | %.0f | %.2f | %.2fx |" % (name, sps, cpu_ms, sps / base_sps))
    print()
    for name, r in zip(names, runs):
        if r:
            print("every run of %s: CPU ms/step %s" % (
                name.split(" (")[0], " ".join("%.2f" % cpu for _, cpu in r)))
    if t is not None:
        print("dapple 1 process vs PyTorch 1 thread: %.2fx by samples/s, %.2fx by CPU time per step"
              % (base_sps / t[0], t[1] / base_cpu))
    one_stage_cpu = rows[1][1][1]
    for k in (2, 3):
        name, (_, cpu_ms) = rows[k]
        print("%s: CPU per step %.2fx the 1-stage job's (same M; %.2fx by the medians), %.2fx "
              "dapple-reference's" % (name.split(", ", 2)[2].split(" (")[0], cpu_ms / one_stage_cpu,
                                      median_cpu(runs[k]) / median_cpu(runs[1]), cpu_ms / base_cpu))
    print("\n%d steps of global batch 256 each (cluster CPU: from step %d to the last step before "
          "the end), best of %d; %s, load average %.1f" % (STEPS, STEPS // 5, REPEATS,
                                            time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0]))


if __name__ == "__main__":
    main()
