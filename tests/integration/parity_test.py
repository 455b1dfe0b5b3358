"""The parity harness across real processes: the same model, seed and global batch trained
(a) in one process without pipelining (dapple-reference) and (b) through a real coordinator and
2 and 3 real worker processes talking over UCX, with gpipe and with dapple, for M in {1, 2, 4, 8}.
Per-step loss and final weights must agree within 1e-5 relative (fp32).
"""
import math
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 3
GLOBAL_BATCH = 64
RTOL = 1e-5


def load_params(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        (n,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off:off + n].decode()
        off += n
        (count,) = struct.unpack_from("<Q", data, off)
        off += 8
        out[name] = struct.unpack_from("<%df" % count, data, off)
        off += 4 * count
    return out


def relative_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / max(den, 1e-30))


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = cluster.Cluster(workers=3, dump=True)
        cls.cluster.wait_workers(3)
        ref_dir = os.path.join(cls.cluster.dir, "ref")
        os.makedirs(ref_dir)
        spec = cluster.spec_yaml("parity-ref", cluster.SMALL_MLP, GLOBAL_BATCH, GLOBAL_BATCH, 1,
                                 max_steps=STEPS)
        path = os.path.join(ref_dir, "ref.yaml")
        with open(path, "w") as f:
            f.write(spec)
        subprocess.run([cluster.REFERENCE, path, str(STEPS), ref_dir], check=True, timeout=120)
        with open(os.path.join(ref_dir, "reference.losses")) as f:
            cls.ref_losses = [float(x) for x in f]
        cls.ref_params = load_params(os.path.join(ref_dir, "reference.params"))

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
        losses = j["step_losses"]
        self.assertEqual(len(losses), STEPS)
        for step, (got, want) in enumerate(zip(losses, self.ref_losses), 1):
            self.assertLessEqual(abs(got - want), RTOL * abs(want),
                                 "%s step %d loss %.9g vs reference %.9g" % (name, step, got, want))
        params = {}
        for s in range(stages):
            params.update(load_params(os.path.join(c.dump_dir, "%s.stage%d.params" % (job, s))))
        self.assertEqual(sorted(params), sorted(self.ref_params))
        for k, want in self.ref_params.items():
            got = params[k]
            scale = max(abs(x) for x in want)
            worst = max(abs(x - y) for x, y in zip(got, want))
            self.assertLessEqual(relative_l2(got, want), RTOL, "%s %s" % (name, k))
            self.assertLessEqual(worst, RTOL * scale, "%s %s max |diff| %.3g" % (name, k, worst))

    def test_parity(self):
        for stages in (2, 3):
            for schedule in ("gpipe", "dapple"):
                for m in (1, 2, 4, 8):
                    with self.subTest(schedule=schedule, stages=stages, micro_batches=m):
                        self.check_job(schedule, stages, m)


if __name__ == "__main__":
    unittest.main()
