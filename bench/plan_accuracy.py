"""The simulator's predicted step time against the measured one, for the demo model on this
machine: a real coordinator and 2 worker processes; each job's model is measured on a worker
before planning (the coordinator's measured profile), planned, simulated, then run.
  - the demo job (examples/fashion_mnist_mlp.yaml: 2 stages, dapple 1F1B, M = 8), and gpipe;
  - P = 1 (one worker, no pipeline).
Measured step time = global batch / samples per second over the last steps (the job's metric).
This machine gives about one core of compute, so the two stages share it: the simulator (which
gives each stage its own device) is expected to under-predict pipelined runs here; the P = 1 row
is the like-for-like check of the profile and cost model.
Usage: /usr/bin/python3 bench/plan_accuracy.py [STEPS]    (after scripts/setup)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 80
MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0), ("linear", 10)]


def run(c, name, stages, schedule):
    job = c.submit(cluster.spec_yaml(name, MLP, 256, 32, stages, schedule=schedule,
                                     max_steps=STEPS))
    j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=900)
    assert j["state"] == "SUCCEEDED", j.get("message")
    plan = j["plan"]
    measured_ms = 256.0 / j["metrics"]["samples_per_second"] * 1000.0
    return plan, measured_ms


def main():
    c = cluster.Cluster(workers=2)
    try:
        c.wait_workers(2)
        rows = []
        for name, stages, schedule in (("acc-p1", 1, "dapple"), ("acc-dapple", 2, "dapple"),
                                       ("acc-gpipe", 2, "gpipe")):
            plan, measured = run(c, name, stages, schedule)
            rows.append((name, stages, schedule, plan["micro_batches"], plan["predicted_step_ms"],
                         measured, plan["profile_source"]))
    finally:
        c.close()
    print("| job | P | schedule | M | predicted step ms | measured step ms | measured / predicted | profile |")
    print("|---|---|---|---|---|---|---|---|")
    for name, p, sched, m, pred, meas, src in rows:
        print("| %s | %d | %s | %d | %.2f | %.2f | %.2f | %s |" % (name, p, sched, m, pred, meas,
                                                             meas / pred, src))


if __name__ == "__main__":
    main()
