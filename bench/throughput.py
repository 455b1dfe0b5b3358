"""Training throughput of the demo model (MLP 784-1024-1024-10, global batch 256, SGD momentum),
side by side in one run:
  (a) dapple, one process, no pipeline (dapple-reference)
  (b) dapple, 2-stage pipeline through a real coordinator and 2 worker processes over UCX,
      schedules dapple and gpipe, M = 8
  (c) PyTorch (Debian's python3-torch), one process, torch.set_num_threads(1)
This machine gives about one core of compute, so (b)'s two stages share it: compare ratios.
Usage: /usr/bin/python3 bench/throughput.py [STEPS]    (after scripts/setup; needs python3-torch)
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0), ("linear", 10)]


def single_process():
    d = tempfile.mkdtemp()
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write(cluster.spec_yaml("bench-ref", MLP, 256, 256, 1, max_steps=STEPS))
    out = subprocess.run([cluster.REFERENCE, spec, str(STEPS), d], check=True, capture_output=True,
                         text=True, timeout=600).stdout
    return float(re.search(r"samples_per_second ([0-9.]+)", out).group(1))


def pipeline(c, schedule):
    job = c.submit(cluster.spec_yaml("bench-" + schedule, MLP, 256, 32, 2, schedule=schedule,
                                     max_steps=STEPS))
    j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=900)
    assert j["state"] == "SUCCEEDED", j.get("message")
    return j["metrics"]["samples_per_second"]


def torch_peer():
    code = r"""
import time, torch, torch.nn as nn
torch.set_num_threads(1); torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(256, 784); y = torch.randint(0, 10, (256,))
def step():
    opt.zero_grad(set_to_none=True); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
for _ in range(5): step()
t0 = time.perf_counter()
for _ in range(%d): step()
print(%d * 256 / (time.perf_counter() - t0))
""" % (STEPS, STEPS)
    try:
        out = subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True,
                             text=True, timeout=600).stdout
        return float(out.strip())
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("torch peer unavailable (install python3-torch): %s" % e, file=sys.stderr)
        return None


def main():
    rows = [("dapple, 1 process, no pipeline", single_process())]
    c = cluster.Cluster(workers=2)
    try:
        c.wait_workers(2)
        rows.append(("dapple, 2 stages x 1 process, schedule dapple, M=8", pipeline(c, "dapple")))
        rows.append(("dapple, 2 stages x 1 process, schedule gpipe, M=8", pipeline(c, "gpipe")))
    finally:
        c.close()
    t = torch_peer()
    if t is not None:
        rows.append(("PyTorch 1.13, 1 process, 1 thread", t))
    base = rows[0][1]
    print("| configuration | samples/s | vs dapple 1 process |")
    print("|---|---:|---:|")
    for name, v in rows:
        print("| %s | %.0f | %.2fx |" % (name, v, v / base))
    print("\n%d steps of global batch 256 each; %s" % (STEPS, time.strftime("%Y-%m-%d")))


if __name__ == "__main__":
    main()
