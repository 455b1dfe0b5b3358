"""The asynchronous schedules train for real: a real coordinator and real worker processes on
127.0.0.1 train the demo MLP (784-1024-1024-10) on Fashion-MNIST with
  - pipedream: PipeDream's asynchronous 1F1B with weight stashing on 2 stages, 3 epochs (the
    demo's settings: sgd lr 0.05, momentum 0.9), on one worker per stage (0.872), and with
    1F1B-RR on two replicas per stage (4 workers: whole micro-batches round-robin; stage 0 runs
    4 micro-batches ahead instead of 2, so 3 epochs give only 0.856, 4 epochs 0.876), and
  - pipesgd: Pipe-SGD (AllReduce of step t overlapping step t+1, one-step-stale updates) on
    2 replicas, 6 epochs with sgd lr 0.1, momentum 0.5 (with the demo's settings it levels off
    near 0.855 after 4-5 epochs: stale gradients and heavy momentum; these reach 0.878),
and each reaches >= 0.85 test accuracy (the issue's bar; dapple reaches 0.866 on the demo). The
pipedream job reports per-stage weight versions (PipeDream's stash); the replicas of a 1F1B-RR
stage end with bitwise-identical weights.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

DEMO_MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0),
            ("linear", 10)]


def demo_job(name, schedule, stages, devices, planner, epochs=3, lr=0.05, momentum=0.9):
    return cluster.spec_yaml(name, DEMO_MLP, 256, 32, stages, schedule=schedule, epochs=epochs,
                             lr=lr, momentum=momentum, seed=42, planner=planner, devices=devices)


class SchedulesTest(unittest.TestCase):
    def setUp(self):
        self.c = cluster.Cluster(workers=4, dump=True)
        self.c.wait_workers(4)

    def tearDown(self):
        self.c.close()

    def run_job(self, text, name):
        job = self.c.submit(text, name=name + ".yaml")
        self.job = job
        j = self.c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=400)
        self.assertEqual(j["state"], "SUCCEEDED", "%s\n%s" % (j, self.c.all_logs()))
        m = j["metrics"]
        print("%s: test accuracy %.4f, %.0f samples/s" % (name, m.get("test_accuracy", 0),
                                                         m.get("samples_per_second", 0)),
              file=sys.stderr)
        return j

    def test_pipedream_reaches_085(self):
        j = self.run_job(demo_job("pd", "pipedream", 2, 2, "balanced"), "pd")
        self.assertGreaterEqual(j["metrics"]["test_accuracy"], 0.85)
        stats = {s["stage"]: s["last"] for s in j.get("stage_metrics", [])}
        # Weight stashing: stage 0 of 2 holds the live version and one stashed (at most P - i).
        self.assertEqual(stats[0].get("weight_versions"), 2, stats)
        self.assertGreater(int(stats[0].get("weight_version_bytes", 0)), 0)
        self.assertEqual(stats[1].get("weight_versions"), 1, stats)

    def test_pipedream_round_robin_on_two_replicas_per_stage_reaches_085(self):
        name = "pdrr"
        j = self.run_job(demo_job(name, "pipedream", 2, 4, "balanced", epochs=4), name)
        self.assertGreaterEqual(j["metrics"]["test_accuracy"], 0.85)
        self.assertEqual([s["replicas"] for s in j["plan"]["stages"]], [2, 2], j["plan"])
        self.assertEqual(len(set(j["worker_ids"])), 4)
        # Stage 0 (K = 4 micro-batches in flight over its 2 replicas) stashes a version on each
        # replica; at most ceil((K - 1) / D) + 1 = 3 (schedule/pipedream_steps.h).
        ranks = {(s["stage"], s.get("replica", 0)): s["last"] for s in j.get("stage_metrics", [])}
        for r in (0, 1):
            self.assertIn(ranks[(0, r)].get("weight_versions"), (2, 3), ranks)
        # Every replica trained: the stage's samples split between them.
        for s in (0, 1):
            for r in (0, 1):
                self.assertGreater(int(ranks[(s, r)].get("samples", 0)), 0, ranks)
        for s in (0, 1):
            blobs = []
            for r in (0, 1):
                path = os.path.join(self.c.dump_dir, "%s.stage%d.replica%d.params" %
                                    (self.job, s, r))
                with open(path, "rb") as f:
                    blobs.append(f.read())
            self.assertEqual(blobs[0], blobs[1], "stage %d: replicas differ" % s)

    def test_pipesgd_on_two_replicas_reaches_085(self):
        j = self.run_job(demo_job("psgd", "pipesgd", 1, 2, "dp", epochs=6, lr=0.1,
                                    momentum=0.5), "psgd")
        self.assertGreaterEqual(j["metrics"]["test_accuracy"], 0.85)
        self.assertEqual(j["plan"]["stages"][0]["replicas"], 2)


if __name__ == "__main__":
    unittest.main()
