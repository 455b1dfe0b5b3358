"""Speed and accuracy of dapple's ResNet against PyTorch, side by side in one run.

The image model of a job spec (default examples/resnet_fmnist.yaml) is trained twice for
--steps steps (default 300; 0: the spec's own steps):
  (a) by dapple in one process, one compute thread (dapple-reference --trace: the CPU kernels,
      no pipeline; a synchronous pipeline trains the same within 1e-5);
  (b) by PyTorch (Debian's python3-torch, tests/torch/torch_cnn.py's model in float32), one
      thread, from dapple's initial weights, on the same batches in the same order, each batch
      run as its micro-batches (batch norm's row groups; running statistics updated once per
      step: docs/layers.md), with the same optimizer and learning-rate schedule;
then both are evaluated on the Fashion-MNIST test set with their running statistics. Prints the
mean step time of each (wall and CPU time: on a loaded machine the CPU time is the figure to
compare), both test accuracies and losses, and the largest per-step training loss
difference (none of them asserted: docs/benchmarks.md has the figures; float32 runs of a network
with ReLUs and max pooling drift apart by rounding over hundreds of steps, so the accuracies
agree only approximately). The learning-rate schedule ends at the job's total steps, as in the
example (a cosine decay of a 300-step run is still near its start).

Usage: /usr/bin/python3 bench/resnet_fmnist_vs_torch.py [JOB.yaml] [--steps N]
(after scripts/setup, which builds dapple and installs python3-torch and Fashion-MNIST)
"""
import argparse
import os
import re
import resource
import shutil
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
import torch_cnn  # noqa: E402


def spec_with_steps(path, steps, directory):
    """The spec at `path`, with training.max_steps = steps when given, written into `directory`."""
    with open(path) as f:
        spec = yaml.safe_load(f)
    if steps:
        spec["training"]["max_steps"] = steps
    out = os.path.join(directory, "job.yaml")
    with open(out, "w") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    return out


def child_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_dapple(spec_path, out):
    """dapple-reference --trace for the job's steps; returns its mean step time and CPU time per
    step in ms."""
    r = subprocess.run([cluster.REFERENCE, spec_path, "0", out, "--trace"], capture_output=True,
                       text=True, timeout=7200)
    if r.returncode != 0:
        raise RuntimeError("dapple-reference: %s%s" % (r.stdout, r.stderr))
    return (float(re.search(r"step_ms ([0-9.]+)", r.stdout).group(1)),
            float(re.search(r"step_cpu_ms ([0-9.]+)", r.stdout).group(1)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("spec", nargs="?",
                        default=os.path.join(SOURCE, "examples", "resnet_fmnist.yaml"))
    parser.add_argument("--steps", type=int, default=300,
                        help="training steps (training.max_steps); 0: the spec's own")
    args = parser.parse_args()
    torch.set_num_threads(1)
    d = tempfile.mkdtemp(prefix="dapple-bench-cnn-")
    try:
        spec_path = spec_with_steps(args.spec, args.steps, d)

        t0, cpu0 = time.time(), child_cpu_seconds()
        dapple_ms, dapple_cpu_ms = run_dapple(spec_path, d)
        trace = torch_cnn.Trace(d)
        dapple_loss, dapple_acc = trace.eval_result()
        print("dapple  (1 process, 1 thread):  %d steps, %.1f ms/step (%.1f ms CPU), test accuracy "
              "%.4f, test loss %.4f   [%.0f s, %.0f s CPU]" % (
                  trace.steps, dapple_ms, dapple_cpu_ms, dapple_acc, dapple_loss,
                  time.time() - t0, child_cpu_seconds() - cpu0), flush=True)

        t0, cpu0 = time.time(), time.process_time()
        model = torch_cnn.Cnn(trace.spec, dtype=torch.float32)
        model.load_dapple(trace.params("initial"))
        result = torch_cnn.train(trace, model)
        images, targets = trace.eval_split()
        torch_loss, torch_acc = torch_cnn.evaluate(model, images, targets)
        torch_ms = 1e3 * result.seconds / trace.steps
        torch_cpu_ms = 1e3 * result.cpu_seconds / trace.steps
        print("PyTorch %s (1 thread, float32): %d steps, %.1f ms/step (%.1f ms CPU), test "
              "accuracy %.4f, test loss %.4f   [%.0f s, %.0f s CPU]" % (
                  torch.__version__, trace.steps, torch_ms, torch_cpu_ms, torch_acc, torch_loss,
                  time.time() - t0, time.process_time() - cpu0), flush=True)
        dapple_losses = trace.losses()
    finally:
        shutil.rmtree(d, ignore_errors=True)

    diffs = [abs(a - b) / b for a, b in zip(dapple_losses, result.losses)]
    print("largest per-step training loss difference: %.2g relative in the first 20 steps, "
          "%.2g in all %d (float32 rounding, amplified over the steps)" % (
              max(diffs[:20]), max(diffs), len(diffs)))
    print("test accuracy: dapple %.4f vs PyTorch %.4f" % (dapple_acc, torch_acc))
    print("step time: dapple %.1f ms vs PyTorch %.1f ms: dapple %.2fx PyTorch's speed" % (
        dapple_ms, torch_ms, torch_ms / dapple_ms))
    print("CPU time per step: dapple %.1f ms vs PyTorch %.1f ms: dapple %.2fx PyTorch's speed" % (
        dapple_cpu_ms, torch_cpu_ms, torch_cpu_ms / dapple_cpu_ms))
    print("%s, %s, load average %.1f" % (os.path.basename(args.spec), time.strftime("%Y-%m-%d"),
                                         os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
