"""The training loop's stall per checkpoint, synchronous (before) against asynchronous (after),
for the demo model (MLP 784-1024-1024-10, global batch 256, micro-batch 32, SGD momentum: 1.86 M
parameters, a 14.9 MB shard with the momentum buffers) on CPU, one stage on one worker through a
real coordinator (docs/operations.md, "Checkpoints").

Each rank logs, for every checkpoint step, how long its loop was blocked ("stalled the loop X ms
(snapshot ..., waiting for the previous save ..., writing ...); the step took Y ms"): with
`dapple-worker --sync-checkpoints` that is the snapshot copy plus encoding, writing and fsync in
the loop (what every save cost before asynchronous saving); by default it is the snapshot copy
(plus any wait for a previous save still in flight), the rest happening on the writer's thread.
Both modes run REPEATS jobs of STEPS steps checkpointing every EVERY steps, interleaved; the table
shows the median and the largest stall, the median time of the step before a checkpoint, the
median stall over it, the median background write, and the best job's samples/s (the background
write competes with training for the CPU).
Usage: /usr/bin/python3 bench/checkpoint_stall.py [STEPS [EVERY [REPEATS]]]
(default 60 steps, every 5, 3 repeats; after scripts/setup; the checkpoint folder is on the
build machine's disk, under the test directory in /tmp)
"""
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
EVERY = int(sys.argv[2]) if len(sys.argv) > 2 else 5
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0), ("linear", 10)]
STALL = re.compile(r"(job-\d+): stage \d+: checkpoint after step (\d+) stalled the loop ([0-9.]+) ms "
                   r"\(snapshot ([0-9.]+) ms, waiting for the previous save ([0-9.]+) ms, writing "
                   r"([0-9.]+) ms\); the step took ([0-9.]+) ms")
WRITTEN = re.compile(r"(job-\d+): stage \d+: checkpoint after step \d+ written in the background "
                     r"\((\d+) bytes, ([0-9.]+) ms\)")


def run(sync):
    """(stalls ms, step ms, background write ms, samples/s) of REPEATS jobs on a fresh cluster."""
    args = ["--sync-checkpoints"] if sync else []
    c = cluster.Cluster(workers=1, worker_args=args)
    stalls, steps, writes, rates = [], [], [], []
    try:
        c.wait_workers(1)
        for i in range(REPEATS):
            text = cluster.spec_yaml("stall-%s-%d" % ("sync" if sync else "async", i), MLP, 256, 32,
                                     1, max_steps=STEPS, training_extra=["checkpoint_every_steps: %d" % EVERY])
            job = c.submit(text)
            j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=900)
            assert j["state"] == "SUCCEEDED", j.get("message")
            assert len(j.get("checkpoints", [])) > 0, "no checkpoint published"
            rates.append(j["metrics"]["samples_per_second"])
            log = cluster.read(os.path.join(c.dir, "worker-it-w1.log"))
            for m in STALL.finditer(log):
                if m.group(1) == job:
                    stalls.append(float(m.group(3)))
                    steps.append(float(m.group(7)))
            for m in WRITTEN.finditer(log):
                if m.group(1) == job:
                    writes.append(float(m.group(3)))
    finally:
        c.close()
    return stalls, steps, writes, rates


def main():
    print("MLP 784-1024-1024-10, global batch 256, micro-batch 32, 1 stage on CPU, %d steps, "
          "checkpoint every %d steps, %d jobs per mode" % (STEPS, EVERY, REPEATS))
    print("%-13s %10s %10s %10s %10s %12s %10s" % ("mode", "stall ms", "max ms", "step ms",
                                                  "stall/step", "bg write ms", "samples/s"))
    for sync in (True, False):
        stalls, steps, writes, rates = run(sync)
        stall, step = statistics.median(stalls), statistics.median(steps)
        print("%-13s %10.2f %10.2f %10.2f %9.1f%% %12s %10.0f" % (
            "synchronous" if sync else "asynchronous", stall, max(stalls), step,
            100 * stall / step, "%.2f" % statistics.median(writes) if writes else "-", max(rates)))


if __name__ == "__main__":
    main()
