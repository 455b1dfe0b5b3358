"""The simulator's predicted step time against the measured one, for the demo model on this
machine: a real coordinator and 2 worker processes; each job's model is measured on a worker
before planning (the coordinator's measured profile), planned, simulated, then run.
  - the demo job (examples/fashion_mnist_mlp.yaml: 2 stages, dapple 1F1B, M = 8), and gpipe;
  - P = 1 (one worker, no pipeline).
Measured step time = global batch / samples per second over the last steps (the job's metric).
The two workers run on one host whose cores they share: each cpu worker measures the host's
compute capacity at registration (worker/daemon/host_capacity.h) and the simulator slows stages
computing at once on it (coordinator/planner/host_contention.h). After the table, each job's
prediction term by term, per stage: the layers' forward + backward + optimizer time, the work
outside the layers (data loading, loss, per-action cost), what sharing the host's cores adds,
the idle time (bubble), the collectives (GLOBAL_NORM, AllReduce) and the transfers; layers +
overhead + contention + idle + collectives is the step (transfers overlap it).
Every job that succeeds refines what the next ones are planned on (docs/coordinator.md,
"Refined by the jobs' steps"): the layer times of the model's cached profile and the cost of a
collective across processes; the profile column says how many jobs refined it. So the first
run of each job is planned on the raw measurement, the later ones on the refined one.
Each job runs REPEATS times (interleaved); the table shows every run and the medians. The
script polls the coordinator once a second: each poll runs dapplectl (about 18 ms of CPU), and
at 10 polls a second the poller took CPU from the 2-stage jobs it timed.
Usage: /usr/bin/python3 bench/plan_accuracy.py [STEPS [REPEATS]]    (default 80 and 3; after
scripts/setup)
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 80
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0), ("linear", 10)]


def run(c, name, stages, schedule):
    job = c.submit(cluster.spec_yaml(name, MLP, 256, 32, stages, schedule=schedule,
                                     max_steps=STEPS))
    j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=900, poll_s=1.0)
    assert j["state"] == "SUCCEEDED", j.get("message")
    plan = j["plan"]
    measured_ms = 256.0 / j["metrics"]["samples_per_second"] * 1000.0
    return plan, measured_ms


def breakdown(name, plan):
    """One line per stage: the prediction's terms (PlanStageSummary, ms per step)."""
    lines = []
    for s, st in enumerate(plan.get("stages", [])):
        compute = st.get("compute_ms", 0.0)
        overhead = st.get("overhead_ms", 0.0)
        contention = st.get("contention_ms", 0.0)
        lines.append("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            name, s, compute - overhead - contention, overhead, contention, st.get("idle_ms", 0.0),
            st.get("allreduce_ms", 0.0), st.get("comm_ms", 0.0),
            compute + st.get("idle_ms", 0.0) + st.get("allreduce_ms", 0.0)))
    return lines


def main():
    c = cluster.Cluster(workers=2)
    try:
        c.wait_workers(2)
        at_registration = sorted(w.get("host_compute_capacity", 0.0) for w in c.workers_json())
        # Each cpu worker measures its host's capacity again 3, 5, 7 and 10 s after registering
        # (worker_daemon.cc kCapacityRefinements) and sends the median in its heartbeats: a
        # measurement at registration can read low while the other processes start.
        time.sleep(11)
        capacities = sorted(w.get("host_compute_capacity", 0.0) for w in c.workers_json())
        rows = []
        plans = {}
        # Interleaved repeats: a slow moment of the host (this VM's 2 vCPUs give 1.4-2.0 cores'
        # worth from one second to the next) then touches one run of each job, not all of one.
        for repeat in range(REPEATS):
            for name, stages, schedule in (("acc-p1", 1, "dapple"), ("acc-dapple", 2, "dapple"),
                                           ("acc-gpipe", 2, "gpipe")):
                plan, measured = run(c, name, stages, schedule)
                rows.append((repeat + 1, name, stages, schedule, plan["micro_batches"],
                             plan["predicted_step_ms"], measured,
                             plan["profile_source"] + "; " + plan.get("cluster_source", "")))
                plans[name] = plan
    finally:
        c.close()
    print("| run | job | P | schedule | M | predicted step ms | measured step ms | "
          "measured / predicted | profile; cluster |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run_no, name, p, sched, m, pred, meas, src in rows:
        print("| %d | %s | %d | %s | %d | %.2f | %.2f | %.2f | %s |" % (
            run_no, name, p, sched, m, pred, meas, meas / pred, src))
    print()
    print("median over the %d runs of each job:" % REPEATS)
    print()
    print("| job | predicted step ms (median) | measured step ms (median) | measured / predicted "
          "(median of the runs' ratios) |")
    print("|---|---|---|---|")
    for name in plans:
        mine = [r for r in rows if r[1] == name]
        print("| %s | %.2f | %.2f | %.2f |" % (
            name, statistics.median(r[5] for r in mine), statistics.median(r[6] for r in mine),
            statistics.median(r[6] / r[5] for r in mine)))
    print()
    print("host compute capacity reported by the workers: %s at registration, %s when planning "
          "(the coordinator takes the smaller of a host's)" % (
              ", ".join("%.2f" % c for c in at_registration),
              ", ".join("%.2f" % c for c in capacities)))
    print()
    print("| job | stage | layers ms | overhead ms | contention ms | idle ms | collectives ms | "
          "transfers ms | sum ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, plan in plans.items():
        for line in breakdown(name, plan):
            print(line)


if __name__ == "__main__":
    main()
