"""tests/gpu/gpu_jobs.py runs its jobs only where a GPU is lent, so nothing else exercises the
helpers it shares with this folder (cluster.py) or its setup (the coordinator's --data-root).
This runs its device-independent checks on cpu workers (DAPPLE_GPU_DEVICE=cpu): the parity jobs
under dapple, zb-h1 and training.recompute all, and the two-cluster mixed parity, each against
dapple-reference within 1e-5. It caught nothing on a GPU; it catches the script's rot (a moved
helper, a data path outside the data roots) before the next GPU run finds it."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_JOBS = os.path.join(HERE, "..", "gpu", "gpu_jobs.py")


class GpuJobsOnCpuTest(unittest.TestCase):
    def test_parity_checks_run_on_cpu_workers(self):
        env = dict(os.environ, DAPPLE_GPU_DEVICE="cpu", PYTHONUNBUFFERED="1",
                   DAPPLE_GPU_JOBS_CHECKS="parity,zb-h1,recompute,mixed")
        p = subprocess.run([sys.executable, GPU_JOBS], env=env, capture_output=True, text=True,
                           timeout=400)
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out[-8000:])
        for label in ("parity", "zb-h1", "recompute", "mixed"):
            self.assertIn("RESULT %s_worst_weight_rel" % label, p.stdout, out[-8000:])
        self.assertIn("gpu_jobs: OK", p.stdout)


if __name__ == "__main__":
    unittest.main()
