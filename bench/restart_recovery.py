#!/usr/bin/env python3
"""Recovery time after a lost worker (training.restart; docs/benchmarks.md, "Recovery after a
lost worker"): the demo job (examples/fashion_mnist_mlp.yaml: MLP 784-1024-1024-10, 2 stages)
with a checkpoint every CKPT steps and restarts on, on 3 workers; one of its ranks is SIGKILLed
after KILL_AFTER steps. Prints the time from the kill to the first step after the restart and
its parts as the job's records show them (the failure seen, the restart planned, the first
step after it), the checkpoint the job resumed from and the steps redone.

    python3 bench/restart_recovery.py [--worker-timeout-ms 2000] [--heartbeat-ms 100] [--runs 3]
"""
import argparse
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

CKPT = 20
KILL_AFTER = 50


def spec():
    with open(os.path.join(HERE, "..", "examples", "fashion_mnist_mlp.yaml")) as f:
        text = f.read()
    return text.replace("  seed: 42\n", "  seed: 42\n  max_steps: 200\n  checkpoint_every_steps: %d\n"
                        "  restart: {max_restarts: 3, backoff_seconds: 0.5}\n" % CKPT)


def one_run(worker_timeout_ms, heartbeat_ms):
    c = cluster.Cluster(workers=3, worker_timeout_ms=worker_timeout_ms, heartbeat_ms=heartbeat_ms)
    try:
        c.wait_workers(3)
        job = c.submit(spec())
        while True:
            j = c.get(job)
            if j["state"] == "RUNNING" and int(j["metrics"].get("step", 0)) >= KILL_AFTER:
                break
            if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                raise SystemExit("job ended before the kill: %s" % j.get("message"))
            time.sleep(0.02)
        victim = j["worker_ids"][-1]
        proc = dict(c.workers)[victim]
        killed_ms = time.time() * 1000
        os.kill(proc.pid, signal.SIGKILL)
        while True:
            j = c.get(job)
            h = j.get("restart_history", [])
            if (h and int(h[0].get("resumed_unix_ms", 0)) > 0 and j["state"] == "RUNNING"
                    and int(j["metrics"].get("step", 0)) > int(h[0].get("resumed_after_step", 0))):
                first_step_ms = time.time() * 1000
                break
            if j["state"] in ("FAILED", "CANCELLED"):
                raise SystemExit("job failed: %s" % j.get("message"))
            time.sleep(0.01)
        r = h[0]
        return {
            "total_s": (first_step_ms - killed_ms) / 1000,
            "detect_s": (int(r["unix_ms"]) - killed_ms) / 1000,
            "replan_s": (int(r["resumed_unix_ms"]) - int(r["unix_ms"])) / 1000,
            "first_step_s": (first_step_ms - int(r["resumed_unix_ms"])) / 1000,
            "cause": r["cause"], "resumed_after": int(r.get("resumed_after_step", 0)),
            "redone": int(r.get("steps_redone", 0)), "plan": r.get("plan", ""),
        }
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker-timeout-ms", type=int, default=2000)
    ap.add_argument("--heartbeat-ms", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        r = one_run(args.worker_timeout_ms, args.heartbeat_ms)
        runs.append(r)
        print("run %d: %.2f s kill -> first step after the restart (failure seen %.2f s, backoff + "
              "re-plan + start %.2f s, resume to first step %.2f s); cause %s, resumed after step "
              "%d, %d steps redone; %s" % (i + 1, r["total_s"], r["detect_s"], r["replan_s"],
                                           r["first_step_s"], r["cause"], r["resumed_after"],
                                           r["redone"], r["plan"]), flush=True)
    print("median recovery %.2f s over %d runs" % (statistics.median(x["total_s"] for x in runs),
                                                   len(runs)))


if __name__ == "__main__":
    main()
