"""Robustness under communication delays (issue 4): a real coordinator and 4 real workers started
with --comm-delay-max-ms 50, so every activation and gradient send and receive between stages
waits a random 0-50 ms first (worker/comm/delay_transport.h). gpipe and dapple on P = 2 and
P = 4 with M = 8 must still finish (every job SUCCEEDED within its deadline: each message wait
is bounded by the workers' --transport-timeout-s, each job by JOB_DEADLINE_S) and still match
the single-process reference (dapple-reference): per-step loss and final weights within 1e-5
relative, as in parity_test.py.
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 3
GLOBAL_BATCH = 64
MICRO_BATCHES = 8
RTOL = 1e-5
DELAY_MAX_MS = 50
# The deadline of one message wait. A step of P = 4, M = 8 has at most 4 M = 32 delayed calls
# per rank (at most 1.6 s of delay), far below it; a deadlock fails the job after it.
TRANSPORT_TIMEOUT_S = 30
# The deadline of one job (3 steps and one evaluation of the test set in 10 chunks).
JOB_DEADLINE_S = 180


class DelayedCluster(cluster.Cluster):
    """Workers with fault injection and this test's transport timeout (cluster.Cluster's
    add_worker fixes --transport-timeout-s at 60, and a flag may be given only once)."""

    def add_worker(self, name=None, log_name=None):
        i = len(self.workers) + 1
        name = name or "it-w%d" % i
        cmd = [cluster.WORKER, "--coordinator", self.address, "--name", name,
               "--transport-timeout-s", str(TRANSPORT_TIMEOUT_S),
               "--comm-delay-max-ms", str(DELAY_MAX_MS), "--dump-dir", self.dump_dir,
               "--join-token-file", self.join_token_file]
        with open(os.path.join(self.dir, "worker-%s.log" % (log_name or name)), "ab") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.workers.append((name, p))
        return name, p


class RobustnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = DelayedCluster(workers=4, dump=True)
        cls.cluster.wait_workers(4)
        cls.ref_losses, cls.ref_params = cluster.reference_run(cls.cluster.dir, "robust-ref",
                                                               GLOBAL_BATCH, STEPS)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def check_job(self, schedule, stages):
        c = self.cluster
        name = "robust-%s-p%d-m%d" % (schedule, stages, MICRO_BATCHES)
        job = c.submit(cluster.spec_yaml(name, cluster.SMALL_MLP, GLOBAL_BATCH,
                                         GLOBAL_BATCH // MICRO_BATCHES, stages,
                                         schedule=schedule, planner="uniform", max_steps=STEPS))
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=JOB_DEADLINE_S)
        self.assertEqual(j["state"], "SUCCEEDED",
                         "%s: %s\n%s" % (name, j.get("message"), c.all_logs()))
        self.assertEqual(len(j["plan"]["stages"]), stages)
        self.assertEqual(j["plan"]["micro_batches"], MICRO_BATCHES)
        # Every rank of the job ran with the delays (the worker says so when the job starts).
        marker = "%s: fault injection: a random 0..%d ms delay" % (job, DELAY_MAX_MS)
        ranks = sum(1 for w, _ in c.workers if marker in cluster.read(
            os.path.join(c.dir, "worker-%s.log" % w)))
        self.assertEqual(ranks, stages, "%s: %d of %d ranks logged %r" % (name, ranks, stages,
                                                                         marker))
        params = cluster.load_job_params(c.dump_dir, job, stages)
        cluster.check_matches_reference(self, name, j["step_losses"], params, self.ref_losses,
                                        self.ref_params, RTOL)

    def test_delayed_pipelines_match_the_reference(self):
        for stages in (2, 4):
            for schedule in ("gpipe", "dapple"):
                with self.subTest(schedule=schedule, stages=stages):
                    self.check_job(schedule, stages)


if __name__ == "__main__":
    unittest.main()
