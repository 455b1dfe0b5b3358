"""The parity harness across real processes: the same model, seed and global batch trained
(a) in one process without pipelining (dapple-reference) and (b) through a real coordinator and
2 and 3 real worker processes talking over UCX, with gpipe and with dapple, for M in {1, 2, 4, 8}.
Per-step loss and final weights must agree within 1e-5 relative (fp32).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 3
GLOBAL_BATCH = 64
RTOL = 1e-5


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = cluster.Cluster(workers=3, dump=True)
        cls.cluster.wait_workers(3)
        cls.ref_losses, cls.ref_params = cluster.reference_run(cls.cluster.dir, "parity-ref",
                                                               GLOBAL_BATCH, STEPS)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def check_job(self, schedule, stages, micro_batches):
        c = self.cluster
        name = "parity-%s-p%d-m%d" % (schedule, stages, micro_batches)
        job = c.submit(cluster.spec_yaml(name, cluster.SMALL_MLP, GLOBAL_BATCH,
                                         GLOBAL_BATCH // micro_batches, stages, schedule=schedule,
                                         max_steps=STEPS))
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120)
        self.assertEqual(j["state"], "SUCCEEDED", "%s: %s\n%s" % (name, j.get("message"), c.all_logs()))
        self.assertEqual(len(j["plan"]["stages"]), stages)
        self.assertEqual(j["plan"]["micro_batches"], micro_batches)
        params = cluster.load_job_params(c.dump_dir, job, stages)
        cluster.check_matches_reference(self, name, j["step_losses"], params, self.ref_losses,
                                        self.ref_params, RTOL)

    def test_parity(self):
        for stages in (2, 3):
            for schedule in ("gpipe", "dapple"):
                for m in (1, 2, 4, 8):
                    with self.subTest(schedule=schedule, stages=stages, micro_batches=m):
                        self.check_job(schedule, stages, m)


if __name__ == "__main__":
    unittest.main()
