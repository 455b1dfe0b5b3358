"""Benchmarks on the emulated device (parallel.device_type: emulated; docs/benchmarks.md).

Every layer's compute is a wait of its profiled time, so schedules, bubbles and memory can be
measured on this machine (about one core) with real processes: a real dapple-coordinator and
real dapple-worker processes on 127.0.0.1 (tests/integration/cluster.py), activations of the
model's real sizes over UCX. Its tables:
  (a) measured step time against the simulator's prediction for the same plan
      (P = 2/4, M = 4/8, gpipe/dapple; goal: within 5%);
  (b) measured bubble (stage idle / step, from the per-stage step stats) against
      (P - 1) / (M + P - 1) for equal stages;
  (c) dapple against gpipe under a device-memory cap (--device-memory) that forces gpipe to a
      smaller global batch: throughput and measured peak memory (DAPPLE paper: 1.6x, 12% less);
  (d) Pipe-SGD against synchronous data parallelism (P = 1, D = 2) when the gradient AllReduce
      takes about as long as a step's compute;
  (e) PipeDream without and with 1F1B-RR (P = 2, M = 8, D = 1 and 2 replicas per stage: whole
      micro-batches round-robin): measured step time against the simulator's prediction, and
      the throughput the replicas add.
  (z) the zero-bubble schedules zb-h1 and zb-h2 against dapple (1F1B) on equal stages with
      T_F = T_B = T_W (the profile's backward is split half/half): measured step against the
      simulator's prediction, bubble per stage against each schedule's formula
      (common/schedule/generators.h), measured peak memory, and ZB-H2's step against
      M (T_F + T_B + T_W), with its deferred non-finite check and with the barrier.
  (m) memory per rank: the planner's predicted peak (common/memory_model.h) against what each
      rank's buffers really held (StageStepStats.peak_memory_bytes: the backend's allocated
      buffers and the weight stash, measured between actions) for gpipe, dapple, pipedream,
      pipedream with 1F1B-RR and pipedream with vertical sync (P = 2, M = 8; goal: within 10%).
  (i) interleaved 1F1B (v = 2) against dapple (1F1B) on equal stages: measured step against
      the plan's prediction and M (T_F + T_B) + (P - 1)(T_F + T_B) / v, bubble per stage against
      (P - 1) / (v M + P - 1).
  (r) activation recomputation (training.recompute all against none; gpipe and dapple, P = 2,
      M = 8): per stage the measured peak activation bytes against the memory model's
      stage-input bound, and the step's growth against one forward per micro-batch.
The model has 8 layers; the emulation profile gives every layer the same times (FWD_MS, BWD_MS at
the micro-batch size), so the stages of balanced plans are equal.

Usage: python3 bench/emulated/run.py [--build DIR] [--steps N] [--only a,b,c,d,e,i,m,r,z]
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

# Seconds between two polls of a running job's per-stage stats (DAPPLE_BENCH_POLL_S). Each poll
# runs dapplectl (about 18 ms of CPU on this 2-vCPU machine): at 0.05 s the poller alone took a
# third of a CPU from the workers, which showed up as per-action overhead in the measured steps
# (P = 4, M = 8: dapple +4.9% against the plan, +2.8% polling every 0.5 s, in two runs a minute apart). A poll sees
# the newest step of each stage, so the stats are a sample of the steps, not every one.
POLL_S = float(os.environ.get("DAPPLE_BENCH_POLL_S", "0.5"))
FWD_MS = 3.0   # per layer per micro-batch
BWD_MS = 6.0
# 8 layers: flatten + 3 x (linear 512, relu) + linear 10.
MODEL = [("flatten", 0), ("linear", 512), ("relu", 0), ("linear", 512), ("relu", 0),
         ("linear", 512), ("relu", 0), ("linear", 10)]


def write_profile(directory, micro_batch):
    """graph.txt with an Input node and one equal entry per model layer, at `micro_batch`."""
    path = os.path.join(directory, "equal8-pbs-%d.txt" % micro_batch)
    with open(path, "w") as f:
        f.write("node0 -- Input -- forward_compute_time=0, backward_compute_time=0, "
                "activation_size=0, parameter_size=0\n")
        for k, (t, _) in enumerate(MODEL):
            f.write("node%d -- %s -- forward_compute_time=%g, backward_compute_time=%g, "
                    "activation_size=0, parameter_size=0\n" % (k + 1, t, FWD_MS, BWD_MS))
        for k in range(len(MODEL)):
            f.write("\tnode%d -- node%d\n" % (k, k + 1))
    return path


def spec(cluster, name, p, m, micro_batch, schedule, steps, profile, training_extra=()):
    text = cluster.spec_yaml(name, MODEL, m * micro_batch, micro_batch, p, schedule=schedule,
                             max_steps=steps, training_extra=training_extra)
    return text + "  device_type: emulated\n  emulation: {profile: %s, scale: 1}\n" % profile


def run_job(c, text, steps, timeout=600, by_rank=False, job=None):
    """Submits (unless `job`, the id of one submitted already), polls the per-stage stats while it
    runs; returns (job json, stats by (stage, step), or by (stage, replica, step) with
    `by_rank`)."""
    job = job or c.submit(text)
    seen = {}  # (stage, step) -> StageStepStats json
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = c.get(job)
        for sm in j.get("stage_metrics", []):
            last = sm.get("last", {})
            if "step" in last:
                key = (sm.get("stage", 0),) + ((sm.get("replica", 0),) if by_rank else ())
                seen[key + (int(last["step"]),)] = last
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(POLL_S)
    assert j["state"] == "SUCCEEDED", (j["state"], j.get("message"))
    j["_job"] = job
    return j, seen


def rank_memory(c, job, ranks, timeout=10):
    """{(stage, replica): (measured, predicted)} from the workers' logs: each rank logs its peak
    against the memory model's prediction for it (worker_daemon.cc) when its training ends."""
    pattern = re.compile(re.escape(job) + r": stage (\d+) replica (\d+): peak memory (\d+) "
                         r"bytes measured, (\d+) bytes predicted")
    deadline = time.time() + timeout
    while True:
        found = {}
        for name in os.listdir(c.dir):
            if name.startswith("worker-") and name.endswith(".log"):
                with open(os.path.join(c.dir, name), errors="replace") as f:
                    for m in pattern.finditer(f.read()):
                        found[(int(m.group(1)), int(m.group(2)))] = (int(m.group(3)),
                                                                     int(m.group(4)))
        if len(found) >= ranks or time.time() > deadline:
            return found
        time.sleep(0.1)


def measured(j, seen, warmup):
    """Step ms (global batch / samples per second), bubble per stage (median over steps after
    `warmup`), peak memory over stages (bytes)."""
    plan = j["plan"]
    gb = int(plan["micro_batch_size"]) * int(plan["micro_batches"])
    step_ms = gb / float(j["metrics"]["samples_per_second"]) * 1000.0
    stages = sorted({s for s, _ in seen})
    bubble, peak = [], 0
    for s in stages:
        rows = [v for (st, n), v in seen.items() if st == s and n > warmup]
        rows = rows or [v for (st, n), v in seen.items() if st == s]
        bubble.append(statistics.median(
            float(v.get("idle_seconds", 0)) / float(v["step_seconds"]) for v in rows))
        peak = max([peak] + [int(v.get("peak_memory_bytes", 0)) for v in rows])
    return step_ms, bubble, peak


def table_ab(cluster, build, steps, directory, micro_batch=32):
    profile = write_profile(directory, micro_batch)
    rows = []
    for p in (2, 4):
        c = cluster.Cluster(workers=p)
        try:
            c.wait_workers(p)
            for m in (4, 8):
                for schedule in ("gpipe", "dapple"):
                    j, seen = run_job(c, spec(cluster, "emu-%s-p%d-m%d" % (schedule, p, m), p, m,
                                              micro_batch, schedule, steps, profile), steps)
                    step_ms, bubble, _ = measured(j, seen, warmup=2)
                    pred = float(j["plan"]["predicted_step_ms"])
                    assert j["plan"].get("emulated"), "plan not marked emulated"
                    rows.append((p, m, schedule, pred, step_ms, bubble))
                    print("P=%d M=%d %-6s predicted %7.1f ms measured %7.1f ms (%+.1f%%) "
                          "bubble %s vs (P-1)/(M+P-1) = %.3f" %
                          (p, m, schedule, pred, step_ms, (step_ms / pred - 1) * 100,
                           " ".join("%.3f" % b for b in bubble), (p - 1) / (m + p - 1)),
                          flush=True)
        finally:
            c.close()
    return rows


def table_c(cluster, steps, directory, p=4, micro_batch=256, m_dapple=16):
    """gpipe holds all M micro-batches' activations, dapple at most P - s on stage s: a memory
    cap that fits gpipe only up to M = P forces it to a quarter of dapple's global batch."""
    profile = write_profile(directory, micro_batch)
    # 1. The cap: the planner's peak for gpipe at M = P (asked of a cluster without a cap).
    c = cluster.Cluster(workers=p)
    try:
        c.wait_workers(p)
        path = os.path.join(directory, "probe.yaml")
        with open(path, "w") as f:
            f.write(spec(cluster, "probe", p, p, micro_batch, "gpipe", steps, profile))
        out = json.loads(c.ctl("plan", path, "-o", "json")[1])
        plan = out.get("plan", out)
        cap = max(int(s["peak_memory_bytes"]) for s in plan["stages"])
    finally:
        c.close()
    cap = int(cap * 1.02)
    c = cluster.Cluster(workers=p, worker_args=["--device-memory", str(cap)])
    results = {}
    try:
        c.wait_workers(p)
        refused = c.submit_text(spec(cluster, "gpipe-m%d" % m_dapple, p, m_dapple, micro_batch,
                                     "gpipe", steps, profile), check=False)
        for schedule, m in (("gpipe", p), ("dapple", m_dapple)):
            text = spec(cluster, "mem-%s-m%d" % (schedule, m), p, m, micro_batch, schedule, steps,
                        profile)
            # The runtime keeps a send and receive buffer per micro-batch id (docs/planner.md,
            # "Memory model"), which grows with M: the plan may not fit the cap.
            code, out, err = c.submit_text(text, check=False)
            if code != 0:
                print("memory cap %d B: %s M=%d refused: %s" %
                      (cap, schedule, m, (out + err).strip().replace("\n", " ")), flush=True)
                continue
            j, seen = run_job(c, text, steps, job=json.loads(out)["id"])
            step_ms, _, peak = measured(j, seen, warmup=2)
            results[schedule] = (m, m * micro_batch, float(j["metrics"]["samples_per_second"]),
                                 peak, step_ms)
            print("memory cap %d B: %-6s M=%d global %d: %.0f samples/s, peak %d B" %
                  (cap, schedule, m, m * micro_batch, results[schedule][2], peak), flush=True)
    finally:
        c.close()
    return cap, refused, results


def table_d(cluster, steps, directory, micro_batch=32, scale=0.07):
    """(d) Pipe-SGD against synchronous data parallelism (P = 1, D = 2, planner dp) with the
    same emulated compute, scaled so that a step's compute is about as long as the real Gloo
    AllReduce of the model's gradients (about 3.7 MB). Synchronous: compute, then AllReduce;
    Pipe-SGD: the AllReduce of step t runs on its own thread during step t + 1."""
    profile = write_profile(directory, micro_batch)
    c = cluster.Cluster(workers=2)
    rows = []
    try:
        c.wait_workers(2)
        for name in ("dapple", "pipesgd"):
            text = cluster.spec_yaml("emu-dp-" + name, MODEL, 2 * micro_batch, micro_batch, 1,
                                     schedule=name, max_steps=steps, planner="dp", devices=2)
            text += ("  device_type: emulated\n  emulation: {profile: %s, scale: %g}\n" %
                     (profile, scale))
            j, seen = run_job(c, text, steps)
            gb = 2 * micro_batch
            sps = float(j["metrics"]["samples_per_second"])
            later = [v for (st, k), v in seen.items() if k > 3]
            # Forward + backward only: Pipe-SGD's optimizer time includes its wait for the
            # previous step's AllReduce.
            compute = statistics.median(float(v.get("forward_seconds", 0)) +
                                        float(v.get("backward_seconds", 0)) for v in later)
            allreduce = statistics.median(float(v.get("allreduce_seconds", 0)) for v in later)
            rows.append((name if name == "pipesgd" else "synchronous (dapple)", 2,
                         compute * 1e3, gb / sps * 1e3, allreduce * 1e3, sps))
    finally:
        c.close()
    return rows


def table_e(cluster, steps, directory, p=2, m=8, micro_batch=32):
    """(e) schedule pipedream on P = 2 equal stages, D = 1 and D = 2 replicas per stage
    (planner balanced, devices = P x D). The simulator prices a replicated stage as PipeDream's
    planner does (a micro-batch every stage time / D); 1F1B-RR runs each replica's share of the
    stage's 1F1B with warm-up K_s = D_s + ... + D_{P-1}."""
    profile = write_profile(directory, micro_batch)
    c = cluster.Cluster(workers=p * 2)
    rows = []
    try:
        c.wait_workers(p * 2)
        for d in (1, 2):
            c.wait_workers(p * 2)
            text = cluster.spec_yaml("emu-pd-d%d" % d, MODEL, m * micro_batch, micro_batch, p,
                                     schedule="pipedream", max_steps=steps, devices=p * d)
            text += "  device_type: emulated\n  emulation: {profile: %s, scale: 1}\n" % profile
            j, seen = run_job(c, text, steps)
            step_ms, bubble, peak = measured(j, seen, warmup=3)
            pred = float(j["plan"]["predicted_step_ms"])
            replicas = [int(s.get("replicas", 1)) for s in j["plan"]["stages"]]
            rows.append((d, replicas, pred, step_ms, float(j["metrics"]["samples_per_second"]),
                         peak))
            # Where a step goes, per stage (median over the steps after the warm-up).
            parts = []
            for st in sorted({s for s, _ in seen}):
                later = [v for (s, k), v in seen.items() if s == st and k > 3] or \
                    [v for (s, k), v in seen.items() if s == st]
                parts.append("stage %d: " % st + " ".join(
                    "%s %.1f" % (key.split("_")[0], 1e3 * statistics.median(
                        float(v.get(key, 0)) for v in later))
                    for key in ("step_seconds", "forward_seconds", "backward_seconds",
                                "allreduce_seconds", "comm_seconds", "optimizer_seconds",
                                "idle_seconds")))
            print("pipedream D=%d %s predicted %.1f ms measured %.1f ms (%+.1f%%); ms per step: %s"
                  % (d, replicas, pred, step_ms, (step_ms / pred - 1) * 100, "; ".join(parts)),
                  flush=True)
    finally:
        c.close()
    return rows


MEMORY_JOBS = (  # (label, schedule, replicas per stage, extra parallel lines)
    ("gpipe", "gpipe", 1, ""),
    ("dapple", "dapple", 1, ""),
    ("pipedream", "pipedream", 1, ""),
    ("pipedream 1F1B-RR", "pipedream", 2, ""),
    ("pipedream vertical sync", "pipedream", 1, "  pipedream: {vertical_sync: true}\n"),
)


def table_m(cluster, steps, directory, p=2, m=8, micro_batch=32):
    """(m) Per rank: the memory model's predicted peak for that replica (the rank logs it; the
    plan's figure for a stage is its largest replica's) against the rank's measured peak (the
    most over the step stats it reported to the coordinator)."""
    profile = write_profile(directory, micro_batch)
    c = cluster.Cluster(workers=p * 2)
    rows = []
    try:
        c.wait_workers(p * 2)
        for label, schedule, d, extra in MEMORY_JOBS:
            c.wait_workers(p * 2)
            text = cluster.spec_yaml("emu-mem-%s-d%d" % (schedule, d), MODEL, m * micro_batch,
                                     micro_batch, p, schedule=schedule, max_steps=steps,
                                     devices=p * d)
            text += extra
            text += "  device_type: emulated\n  emulation: {profile: %s, scale: 1}\n" % profile
            j, seen = run_job(c, text, steps, by_rank=True)
            stages = j["plan"]["stages"]
            logged = rank_memory(c, j["_job"], p * d)
            for (st, rep) in sorted({(s, r) for s, r, _ in seen}):
                stats = [v for (s, r, _), v in seen.items() if s == st and r == rep]
                peak = max(stats, key=lambda v: int(v.get("peak_memory_bytes", 0)))
                measured = int(peak.get("peak_memory_bytes", 0))
                log_measured, predicted = logged[(st, rep)]
                assert log_measured == measured, (st, rep, log_measured, measured)
                plan_peak = int(stages[st]["peak_memory_bytes"])
                largest = max(v[1] for (s, _), v in logged.items() if s == st)
                assert plan_peak == largest, (st, plan_peak, largest)
                rows.append((label, st, rep, predicted, measured, plan_peak,
                             int(peak.get("weight_bytes", 0)),
                             int(peak.get("peak_activation_bytes", 0)),
                             int(peak.get("weight_versions", 1))))
                r = rows[-1]
                print("%s stage %d replica %d: predicted %d B, measured %d B (%+.1f%%), plan %d B:"
                      " weights, gradients, optimizer state and stash %d B, activations and "
                      "buffers %d B, %d weight versions" %
                      (label, st, rep, r[3], r[4], (r[4] / r[3] - 1) * 100, r[5], r[6], r[7],
                       r[8]), flush=True)
    finally:
        c.close()
    return rows


def zb_formulas(schedule, p, m, t):
    """(step ms, bubble per stage) with T_F = T_B = T_W = t (common/schedule/generators.h, which
    zero_bubble_test.cc checks against schedule::Simulate): 1F1B idles 3(P-1)t of a 3(M+P-1)t
    step, ZB-H1 (P-1)t of a (3M+P-1)t step; ZB-H2's stages compute without a gap (the
    parallelogram), so once consecutive steps overlap its period is 3Mt with bubble
    (P-1)(T_F+T_B-2T_W) = 0 (one flushed step alone: 3Mt + (P-1)t, which is every step of
    "zb-h2 barrier": the job-wide check at a barrier, as with clipping or skipped steps)."""
    if schedule == "zb-h2 barrier":
        return 3 * t * m + (p - 1) * t, (p - 1) / (3 * m + p - 1)
    if schedule == "dapple":
        return 3 * t * (m + p - 1), (p - 1) / (m + p - 1)
    if schedule == "zb-h1":
        return 3 * t * m + (p - 1) * t, (p - 1) / (3 * m + p - 1)
    return 3 * t * m, 0.0


def table_z(cluster, steps, directory, micro_batch=32):
    """(z) dapple, zb-h1, zb-h2 on P equal stages (8 layers / P each): T_F = FWD_MS * 8 / P,
    T_B = T_W = BWD_MS / 2 * 8 / P."""
    profile = write_profile(directory, micro_batch)
    rows = []
    for p, ms in ((2, (8,)), (4, (8, 32))):
        c = cluster.Cluster(workers=p)
        try:
            c.wait_workers(p)
            for m in ms:
                # "zb-h2 barrier": zb-h2 where the job-wide non-finite check may skip a step
                # (max_consecutive_skipped_steps 1, no step is non-finite here), so it stays a
                # barrier (GLOBAL_NORM) instead of the deferred GLOBAL_NORM_ASYNC.
                for schedule in ("dapple", "zb-h1", "zb-h2", "zb-h2 barrier"):
                    runs = schedule.split()[0]
                    extra = ("max_consecutive_skipped_steps: 1",) if " " in schedule else ()
                    name = "emu-%s-p%d-m%d" % (schedule.replace(" ", "-"), p, m)
                    j, seen = run_job(c, spec(cluster, name, p, m, micro_batch, runs, steps,
                                              profile, extra), steps)
                    step_ms, bubble, peak = measured(j, seen, warmup=2)
                    pred = float(j["plan"]["predicted_step_ms"])
                    t = FWD_MS * len(MODEL) / p
                    sim_ms, formula = zb_formulas(schedule, p, m, t)
                    rows.append((p, m, schedule, pred, sim_ms, step_ms, bubble, formula, peak,
                                 3 * t * m))
                    print("P=%d M=%d %-13s plan %7.1f ms simulator %7.1f ms measured %7.1f ms "
                          "(%+.1f%%) bubble %s vs %.3f, peak %d B, M(T_F+T_B+T_W) %.1f ms" %
                          (p, m, schedule, pred, sim_ms, step_ms, (step_ms / sim_ms - 1) * 100,
                           " ".join("%.3f" % b for b in bubble), formula, peak, 3 * t * m),
                          flush=True)
        finally:
            c.close()
    return rows


def table_i(cluster, steps, directory, micro_batch=32, v=2):
    """(i) interleaved 1F1B (v = 2 model chunks per stage) against dapple (1F1B) on P equal
    stages of the 8 equal layers: with a rank's T_F = FWD_MS * 8 / P, T_B = BWD_MS * 8 / P,
    1F1B's step is (M + P - 1)(T_F + T_B) and interleaved's M (T_F + T_B) + (P - 1)(T_F + T_B)
    / v, bubbles (P - 1) / (M + P - 1) and (P - 1) / (v M + P - 1) (docs/schedules.md).
    Periodic checkpoints stay off (interleaved refuses them)."""
    profile = write_profile(directory, micro_batch)
    rows = []
    for p, ms in ((2, (4, 8)), (4, (8,))):
        c = cluster.Cluster(workers=p)
        try:
            c.wait_workers(p)
            for m in ms:
                for schedule in ("dapple", "interleaved"):
                    text = spec(cluster, "emu-%s-p%d-m%d" % (schedule, p, m), p, m, micro_batch,
                                schedule, steps, profile)
                    chunks = v if schedule == "interleaved" else 1
                    if chunks > 1:
                        text += "  interleave: %d\n" % chunks
                    j, seen = run_job(c, text, steps)
                    step_ms, bubble, peak = measured(j, seen, warmup=2)
                    pred = float(j["plan"]["predicted_step_ms"])
                    rank = (FWD_MS + BWD_MS) * len(MODEL) / p
                    sim_ms = m * rank + (p - 1) * rank / chunks
                    formula = (p - 1) / (chunks * m + p - 1)
                    rows.append((p, m, schedule, chunks, pred, sim_ms, step_ms, bubble, formula,
                                 peak))
                    print("P=%d M=%d %-11s v=%d plan %7.1f ms formula %7.1f ms measured %7.1f "
                          "ms (%+.1f%%) bubble %s vs %.3f, peak %d B" %
                          (p, m, schedule, chunks, pred, sim_ms, step_ms,
                           (step_ms / pred - 1) * 100, " ".join("%.3f" % b for b in bubble),
                           formula, peak), flush=True)
        finally:
            c.close()
    return rows


def table_r(cluster, steps, directory, p=2, m=8, micro_batch=32):
    """(r) Each schedule with training.recompute none, then all: per stage the measured peak
    activation bytes (StageStepStats.peak_activation_bytes, max over the steps: what the
    backend's buffers held, send and receive buffers included) and the memory model's
    prediction for that rank (the rank logs it; its activations are the peak less the weights
    the rank reports), the median step time after step 2 and the median forward and backward
    seconds per step of each stage."""
    profile = write_profile(directory, micro_batch)
    c = cluster.Cluster(workers=p)
    rows = []
    try:
        c.wait_workers(p)
        for schedule in ("gpipe", "dapple"):
            for recompute in ("none", "all"):
                c.wait_workers(p)
                text = cluster.spec_yaml("emu-rc-%s-%s" % (schedule, recompute), MODEL,
                                         m * micro_batch, micro_batch, p, schedule=schedule,
                                         max_steps=steps,
                                         training_extra=["recompute: %s" % recompute])
                text += "  device_type: emulated\n  emulation: {profile: %s, scale: 1}\n" % \
                    profile
                j, seen = run_job(c, text, steps, by_rank=True)
                logged = rank_memory(c, j["_job"], p)
                plan = j["plan"]
                for st in range(p):
                    stats = [v for (s, r, k), v in seen.items() if s == st and r == 0]
                    later = [v for (s, r, k), v in seen.items() if s == st and r == 0 and k > 2]
                    later = later or stats
                    peak = max(stats, key=lambda v: int(v.get("peak_activation_bytes", 0)))
                    acts = int(peak.get("peak_activation_bytes", 0))
                    predicted_acts = logged[(st, 0)][1] - int(peak.get("weight_bytes", 0))
                    med = lambda key: 1e3 * statistics.median(float(v.get(key, 0)) for v in later)
                    rows.append((schedule, recompute, st,
                                 bool(plan["stages"][st].get("recompute", False)), acts,
                                 predicted_acts, med("step_seconds"), med("forward_seconds"),
                                 med("backward_seconds"), float(plan["predicted_step_ms"]),
                                 int(peak.get("peak_in_flight", 0))))
                    r = rows[-1]
                    print("%s recompute %s stage %d (plan: %s): activations %d B measured, %d B "
                          "predicted; %d in flight; step %.1f ms (predicted %.1f), forward %.1f "
                          "ms, backward %.1f ms per step" %
                          (schedule, recompute, st, r[3], r[4], r[5], r[10], r[6], r[9], r[7],
                           r[8]), flush=True)
    finally:
        c.close()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="a,b,c,d,e,i,m,r,z")
    args = ap.parse_args()
    os.environ["DAPPLE_BUILD_DIR"] = os.path.abspath(args.build)
    import cluster  # noqa: E402  (reads DAPPLE_BUILD_DIR at import)
    # The coordinator reads the profiles written there: one of its data roots (--data-root).
    directory = cluster.data_dir()
    only = args.only.split(",")
    if "a" in only or "b" in only:
        rows = table_ab(cluster, args.build, args.steps, directory)
        print("\n| P | M | schedule | predicted ms | measured ms | error | bubble measured "
              "(per stage) | (P-1)/(M+P-1) |\n|---|---|---|---|---|---|---|---|")
        for p, m, s, pred, meas, bub in rows:
            print("| %d | %d | %s | %.1f | %.1f | %+.1f%% | %s | %.3f |" %
                  (p, m, s, pred, meas, (meas / pred - 1) * 100,
                   ", ".join("%.3f" % b for b in bub), (p - 1) / (m + p - 1)))
    if "c" in only:
        cap, refused, res = table_c(cluster, args.steps, directory)
        print("\nmemory cap per device: %d bytes" % cap)
        print("gpipe at dapple's global batch: exit %d: %s" %
              (refused[0], (refused[1] + refused[2]).strip().replace("\n", " ")))
        print("| schedule | M | global batch | samples/s | step ms | measured peak memory |\n"
              "|---|---|---|---|---|---|")
        for s in ("gpipe", "dapple"):
            if s not in res:
                continue
            m, gb, sps, peak, step_ms = res[s]
            print("| %s | %d | %d | %.0f | %.1f | %d |" % (s, m, gb, sps, step_ms, peak))
        if "gpipe" in res and "dapple" in res:
            g, d = res["gpipe"], res["dapple"]
            print("dapple / gpipe throughput: %.2fx; peak memory: %+.1f%%" %
                  (d[2] / g[2], (d[3] / g[3] - 1) * 100 if g[3] else float("nan")))
    if "d" in only:
        rows = table_d(cluster, args.steps, directory)
        print("\n| schedule | replicas | forward + backward ms (emulated) | step ms | ALLREDUCE "
              "action ms (in the step) | samples/s |\n|---|---|---|---|---|---|")
        for name, d, compute, step_ms, allreduce_ms, sps in rows:
            print("| %s | %d | %.1f | %.1f | %.1f | %.0f |" %
                  (name, d, compute, step_ms, allreduce_ms, sps))
        print("pipesgd / synchronous throughput: %.2fx" % (rows[1][5] / rows[0][5]))
    if "e" in only:
        rows = table_e(cluster, args.steps, directory)
        print("\n| schedule | replicas per stage | predicted ms | measured ms | error | "
              "samples/s | measured peak memory |\n|---|---|---|---|---|---|---|")
        for d, replicas, pred, meas, sps, peak in rows:
            print("| pipedream%s | %s | %.1f | %.1f | %+.1f%% | %.0f | %d |" %
                  (" (1F1B-RR)" if d > 1 else "", ", ".join(map(str, replicas)), pred, meas,
                   (meas / pred - 1) * 100, sps, peak))
        print("1F1B-RR (D = 2) / unreplicated throughput: %.2fx" % (rows[1][4] / rows[0][4]))
    if "z" in only:
        rows = table_z(cluster, args.steps, directory)
        print("\n| P | M | schedule | plan's predicted ms | simulator ms | measured ms | error | "
              "bubble measured (per stage) | formula | measured peak memory | "
              "step / M(T_F+T_B+T_W) |\n|---|---|---|---|---|---|---|---|---|---|---|")
        for p, m, s, pred, sim_ms, meas, bub, formula, peak, ideal in rows:
            print("| %d | %d | %s | %.1f | %.1f | %.1f | %+.1f%% | %s | %.3f | %d | %.3f |" %
                  (p, m, s, pred, sim_ms, meas, (meas / sim_ms - 1) * 100,
                   ", ".join("%.3f" % b for b in bub), formula, peak, meas / ideal))
        by = {(p, m, s): r for p, m, s, *r in rows}
        for p, m in sorted({(p, m) for p, m, *_ in rows}):
            d, h1 = by.get((p, m, "dapple")), by.get((p, m, "zb-h1"))
            if d and h1:
                # Idle time per stage (bubble x step), ZB-H1 over 1F1B, and their peaks.
                ratio = statistics.mean(b * h1[2] for b in h1[3]) / statistics.mean(
                    b * d[2] for b in d[3])
                print("P=%d M=%d: ZB-H1 idle / 1F1B idle %.2f (bubble fraction %.2f), peak "
                      "memory %+.1f%%" % (p, m, ratio, statistics.mean(h1[3]) /
                                          statistics.mean(d[3]), (h1[5] / d[5] - 1) * 100))
            h2, barrier = by.get((p, m, "zb-h2")), by.get((p, m, "zb-h2 barrier"))
            if h2 and barrier:
                print("P=%d M=%d: ZB-H2 step with the deferred check / with the barrier %.3f "
                      "(formula %.3f)" % (p, m, h2[2] / barrier[2], h2[1] / barrier[1]))
    if "i" in only:
        rows = table_i(cluster, args.steps, directory)
        print("\n| P | M | schedule | v | plan's predicted ms | formula ms | measured ms | error "
              "(vs plan) | bubble measured (per stage) | (P-1)/(vM+P-1) | measured peak memory "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|")
        for p, m, s, v, pred, sim_ms, meas, bub, formula, peak in rows:
            print("| %d | %d | %s | %d | %.1f | %.1f | %.1f | %+.1f%% | %s | %.3f | %d |" %
                  (p, m, s, v, pred, sim_ms, meas, (meas / pred - 1) * 100,
                   ", ".join("%.3f" % b for b in bub), formula, peak))
    if "m" in only:
        rows = table_m(cluster, args.steps, directory)
        print("\n| schedule | stage | replica | predicted peak memory | measured peak memory | "
              "measured / predicted | plan (stage's largest replica) | measured: weights, "
              "gradients, optimizer state, stash | measured: activations and buffers | "
              "weight versions |\n|---|---|---|---|---|---|---|---|---|---|")
        for label, st, rep, pred, meas, plan_peak, weights, acts, versions in rows:
            print("| %s | %d | %d | %d | %d | %.3f | %d | %d | %d | %d |" %
                  (label, st, rep, pred, meas, meas / pred, plan_peak, weights, acts, versions))
        worst = max(abs(r[4] / r[3] - 1) for r in rows)
        print("largest |measured / predicted - 1| over every rank: %.1f%%" % (worst * 100))
    if "r" in only:
        rows = table_r(cluster, args.steps, directory)
        print("\n| schedule | recompute | stage | in flight | measured peak activations (bytes) | "
              "predicted | measured step ms | predicted step ms | forward ms per step | "
              "backward ms per step |\n|---|---|---|---|---|---|---|---|---|---|")
        for (sched, rc, st, planned, acts, pred, step, fwd, bwd, pstep, inflight) in rows:
            print("| %s | %s | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.1f |" %
                  (sched, rc, st, inflight, acts, pred, step, pstep, fwd, bwd))

if __name__ == "__main__":
    main()
