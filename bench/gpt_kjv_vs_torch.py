"""Accuracy and speed of dapple's GPT against PyTorch, side by side in one run.

The GPT of a job spec (default examples/gpt_kjv.yaml: the King James Bible) is trained twice
for the spec's steps (or --steps N):
  (a) by dapple in one process, one compute thread (dapple-reference --trace: the CPU kernels,
      no pipeline; a synchronous pipeline trains the same within 1e-5);
  (b) by PyTorch (Debian's python3-torch, tests/torch/torch_gpt.py), one thread, from dapple's
      initial weights, on the same batches in the same order, with the same optimizer, clipping
      and learning-rate schedule;
then both are evaluated on the validation split. Prints both validation losses (nats per byte
and bits per byte), their relative difference (dapple's must be within 2 % of PyTorch's: exit 1
otherwise) and the mean step time of each (not asserted: docs/benchmarks.md has the figures).
--cluster also runs the job as the example does, on a coordinator and workers on 127.0.0.1
(its pipeline as planned), and prints its validation loss.

Usage: /usr/bin/python3 bench/gpt_kjv_vs_torch.py [JOB.yaml] [--steps N] [--cluster]
(after scripts/setup, which builds dapple and installs python3-torch and the KJV text)
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..")
# Both peers run in bench/peer_env.py's environment: without the machine's OpenBLAS overrides,
# and PyTorch (in this process) on truly one thread (OpenBLAS's own threads included).
sys.path.insert(0, HERE)
import peer_env  # noqa: E402

peer_env.reexec_in_peer_env()

import torch  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE, "tests", "torch"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import cluster  # noqa: E402
import torch_gpt  # noqa: E402

TOLERANCE = 0.02  # dapple's validation loss within 2 % of PyTorch's


def spec_with_steps(path, steps, directory):
    """The spec at `path`, with training.max_steps = steps when given, written into `directory`.
    A shortened run keeps its learning-rate schedule within its steps (the spec refuses a warm-up
    or decay longer than the job): the warm-up becomes at most a quarter of the steps, the decay
    ends at the last one."""
    with open(path) as f:
        spec = yaml.safe_load(f)
    if steps:
        spec["training"]["max_steps"] = steps
        schedule = spec["training"].get("lr_schedule") or {}
        if schedule.get("warmup_steps", 0) >= steps:
            schedule["warmup_steps"] = steps // 4
            print("lr_schedule.warmup_steps %d for the %d steps" % (steps // 4, steps))
        if schedule.get("decay_steps", 0) > steps:
            schedule["decay_steps"] = 0
    out = os.path.join(directory, "job.yaml")
    with open(out, "w") as f:
        yaml.dump(spec, f, Dumper=_SpecDumper, sort_keys=False)
    return out


class _SpecDumper(yaml.SafeDumper):
    """Writes a string with a line break double-quoted ("\\n"): PyYAML's default single-quoted
    form of sample.prompt "\\n" spans lines, which dapple's parser (yaml-cpp) reads as empty."""


_SpecDumper.add_representer(str, lambda dumper, s: dumper.represent_scalar(
    "tag:yaml.org,2002:str", s, style='"' if "\n" in s else None))


def run_dapple(spec_path, out):
    """dapple-reference --trace for the job's steps; returns its mean step time and CPU time per
    step in ms."""
    r = subprocess.run([cluster.REFERENCE, spec_path, "0", out, "--trace"], capture_output=True,
                       text=True, check=True, timeout=7200)
    return (float(re.search(r"step_ms ([0-9.]+)", r.stdout).group(1)),
            float(re.search(r"step_cpu_ms ([0-9.]+)", r.stdout).group(1)))


def run_cluster(spec_path, steps):
    """The job on a local coordinator and as many workers as its parallel.devices."""
    with open(spec_path) as f:
        devices = int(yaml.safe_load(f)["parallel"].get("devices", 1))
    c = cluster.Cluster(workers=devices)
    try:
        c.wait_workers(devices)
        with open(spec_path) as f:
            job = c.submit(f.read())
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=max(600, steps * 3))
        if j["state"] != "SUCCEEDED":
            raise RuntimeError("cluster job %s: %s" % (j["state"], j.get("message")))
        return j
    finally:
        c.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("spec", nargs="?", default=os.path.join(SOURCE, "examples", "gpt_kjv.yaml"))
    parser.add_argument("--steps", type=int, default=0, help="override training.max_steps")
    parser.add_argument("--cluster", action="store_true", help="also run the job on a local cluster")
    args = parser.parse_args()
    torch.set_num_threads(1)
    d = tempfile.mkdtemp(prefix="dapple-bench-gpt-")
    spec_path = spec_with_steps(args.spec, args.steps, d)

    t0 = time.time()
    dapple_ms, dapple_cpu_ms = run_dapple(spec_path, d)
    trace = torch_gpt.Trace(d)
    dapple_loss, dapple_acc = trace.eval_result()
    print("dapple  (1 process, 1 thread): %d steps, %.1f ms/step (%.1f ms CPU), validation loss "
          "%.4f (%.4f bits/byte, accuracy %.4f)   [%.0f s]" % (
              trace.steps, dapple_ms, dapple_cpu_ms, dapple_loss, dapple_loss / math.log(2),
              dapple_acc, time.time() - t0), flush=True)

    t0 = time.time()
    model = torch_gpt.Gpt(trace.spec)
    model.load_dapple(trace.params("initial"))
    result = torch_gpt.train(trace, model)
    tokens, targets = trace.eval_split()
    torch_loss, torch_acc = torch_gpt.evaluate(model, tokens, targets)
    torch_ms = 1e3 * result.seconds / trace.steps
    torch_cpu_ms = 1e3 * result.cpu_seconds / trace.steps
    print("PyTorch %s (1 thread):        %d steps, %.1f ms/step (%.1f ms CPU), validation loss "
          "%.4f (%.4f bits/byte, accuracy %.4f)   [%.0f s]" % (
              torch.__version__, trace.steps, torch_ms, torch_cpu_ms, torch_loss,
              torch_loss / math.log(2), torch_acc, time.time() - t0), flush=True)
    worst_step = max(abs(a - b) / b for a, b in zip(trace.losses(), result.losses))
    print("largest per-step training loss difference: %.2g relative" % worst_step)

    if args.cluster:
        j = run_cluster(spec_path, trace.steps)
        m = j["metrics"]
        stages = ", ".join("layers %d-%d x%d" % (s.get("first_layer", 0), s["last_layer"],
                                                  s.get("replicas", 1)) for s in j["plan"]["stages"])
        print("dapple cluster (%s; %s): validation loss %.4f, %.0f samples/s" % (
            j["plan"]["schedule"], stages, m["validation_loss"], m["samples_per_second"]))

    diff = (dapple_loss - torch_loss) / torch_loss
    print("validation loss: dapple %.4f vs PyTorch %.4f: %+.2f %% (limit %.0f %%)" % (
        dapple_loss, torch_loss, 100 * diff, 100 * TOLERANCE))
    print("step time: dapple %.1f ms vs PyTorch %.1f ms: dapple %.2fx PyTorch's speed" % (
        dapple_ms, torch_ms, torch_ms / dapple_ms))
    print("CPU time per step: dapple %.1f ms vs PyTorch %.1f ms: dapple %.2fx PyTorch's speed" % (
        dapple_cpu_ms, torch_cpu_ms, torch_cpu_ms / dapple_cpu_ms))
    print("%s, %s" % (os.path.basename(args.spec), time.strftime("%Y-%m-%d")))
    return 0 if abs(diff) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
