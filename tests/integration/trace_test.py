"""Pipeline timelines end to end: a real 2-stage job on a coordinator started with
--trace-every-steps 4 and two workers; `dapplectl top --once` while it runs shows every stage;
`dapplectl trace` writes Chrome trace-event JSON that passes tests/integration/trace_schema.json,
has one process per stage with every kind of action, and whose idle events per stage add up to
the bubble the workers reported (the trace's step event and `dapplectl get -o json`
stage_metrics) within 5%; the trace survives a coordinator restart; a job with no traced step
gets a one-line error.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(__file__), "trace_schema.json")
TRACE_EVERY = 4
STEPS = 40
# The demo's MLP: its compute is large enough that each stage's bubble is milliseconds.
DEMO_MLP = [("flatten", 0), ("linear", 1024), ("relu", 0), ("linear", 1024), ("relu", 0),
            ("linear", 10)]


def validate(value, schema, root, path="$"):
    """A stdlib validator for the JSON Schema subset trace_schema.json uses; returns errors."""
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return validate(value, root["definitions"][name], root, path)
    errors = []
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str}
    if kind in types and not isinstance(value, types[kind]):
        return ["%s: expected %s, got %r" % (path, kind, value)]
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return ["%s: expected an integer, got %r" % (path, value)]
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return ["%s: expected a number, got %r" % (path, value)]
    if "const" in schema and value != schema["const"]:
        errors.append("%s: expected %r, got %r" % (path, schema["const"], value))
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %r not in %r" % (path, value, schema["enum"]))
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errors.append("%s: %r < %r" % (path, value, schema["minimum"]))
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append("%s: missing %r" % (path, key))
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                errors += validate(v, props[key], root, "%s.%s" % (path, key))
            elif schema.get("additionalProperties") is False:
                errors.append("%s: unexpected key %r" % (path, key))
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += validate(v, schema["items"], root, "%s[%d]" % (path, i))
    if "anyOf" in schema:
        branches = [validate(value, s, root, path) for s in schema["anyOf"]]
        if all(branches):
            errors.append("%s: matches no anyOf branch: %s" % (path, min(branches, key=len)))
    return errors


class ValidatorTest(unittest.TestCase):
    def test_the_validator_rejects_what_it_should(self):
        with open(SCHEMA) as f:
            schema = json.load(f)
        good = {"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "stage 0"}},
            {"ph": "X", "name": "F0", "cat": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
             "args": {"step": 1, "micro_batch": 0}}],
            "displayTimeUnit": "ms",
            "metadata": {"job_id": "job-1", "num_stages": 1, "traced_steps": [1], "ranks": 1}}
        self.assertEqual(validate(good, schema, schema), [])
        for bad_event in [
                {"ph": "X", "name": "F0", "cat": "forward", "pid": 1, "tid": 1, "ts": 0,
                 "args": {"step": 1}},                                      # no dur
                {"ph": "X", "name": "F0", "cat": "compute", "pid": 1, "tid": 1, "ts": 0,
                 "dur": 1, "args": {"step": 1}},                            # unknown cat
                {"ph": "X", "name": "F0", "cat": "forward", "pid": 1, "tid": 1, "ts": -4,
                 "dur": 1, "args": {"step": 1}},                            # negative ts
                {"ph": "B", "name": "F0", "pid": 1, "tid": 1, "ts": 0, "args": {}},  # unknown ph
                {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"label": "x"}}]:
            bad = json.loads(json.dumps(good))
            bad["traceEvents"].append(bad_event)
            self.assertNotEqual(validate(bad, schema, schema), [], bad_event)


class TraceTest(unittest.TestCase):
    def setUp(self):
        self.c = cluster.Cluster(workers=2,
                                 coordinator_args=["--trace-every-steps", str(TRACE_EVERY)])
        self.c.wait_workers(2)

    def tearDown(self):
        if hasattr(self, "_outcome") and any(e for _, e in getattr(self._outcome, "errors", [])):
            print(self.c.all_logs())
        self.c.close()

    def wait_stage_metrics(self, job, timeout=60):
        deadline = time.time() + timeout
        j = None
        while time.time() < deadline:
            j = self.c.get(job)
            if len(j.get("stage_metrics", [])) == 2 or j["state"] in ("SUCCEEDED", "FAILED",
                                                                        "CANCELLED"):
                return j
            time.sleep(0.05)
        raise AssertionError("no stage metrics of 2 stages after %d s: %s" % (timeout, j))

    def write_trace(self, job):
        path = os.path.join(self.c.dir, "trace-%s.json" % job)
        _, out, _ = self.c.ctl("trace", job, "-o", path)
        with open(path) as f:
            return out, json.load(f)

    def test_trace_matches_the_reported_bubble(self):
        job = self.c.submit(cluster.spec_yaml("traced", DEMO_MLP, 256, 32, 2, max_steps=STEPS))
        j = self.wait_stage_metrics(job)
        # 40 steps and an evaluation take seconds: the job is still running.
        self.assertEqual(j["state"], "RUNNING", j)
        _, top, _ = self.c.ctl("top", "--once")
        self.assertIn("%s (traced)" % job, top)
        lines = [l.split() for l in top.splitlines()]
        stages = {l[0] for l in lines if len(l) >= 12 and l[0].isdigit() and
                  l[2].startswith("it-w")}
        self.assertEqual(stages, {"0", "1"}, top)
        _, top_json, _ = self.c.ctl("top", job, "--once", "-o", "json")
        snapshot = json.loads(top_json)
        self.assertEqual([s["stage"] for s in snapshot["jobs"][0]["stages"]], [0, 1])
        j = self.c.wait_state(job, ("SUCCEEDED", "FAILED"), 300)
        self.assertEqual(j["state"], "SUCCEEDED", j)

        summary, trace = self.write_trace(job)
        with open(SCHEMA) as f:
            schema = json.load(f)
        errors = validate(trace, schema, schema)
        self.assertEqual(errors[:5], [])
        # The coordinator keeps the newest 8 traced steps per rank: 12, 16, ..., 40.
        kept = [s for s in range(1, STEPS + 1) if s == 1 or s % TRACE_EVERY == 0][-8:]
        self.assertEqual(trace["metadata"]["traced_steps"], kept)
        self.assertIn("%d traced steps x 2 ranks of %s" % (len(kept), job), summary)

        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(names, {1: "stage 0", 2: "stage 1"})
        cats = {pid: {e["cat"] for e in events if e["pid"] == pid} for pid in (1, 2)}
        # "allreduce": the step's job-wide GLOBAL_NORM (the non-finite check) on every rank.
        self.assertEqual(cats[1], {"step", "forward", "backward", "send", "recv", "optimizer",
                                   "allreduce", "idle"})
        self.assertEqual(cats[2], cats[1])

        metrics = {m["stage"]: m["last"] for m in j["stage_metrics"]}
        for pid in (1, 2):
            for step in kept:
                mine = [e for e in events if e["pid"] == pid and e["args"]["step"] == step]
                step_events = [e for e in mine if e["cat"] == "step"]
                self.assertEqual(len(step_events), 1)
                reported = step_events[0]["args"]["idle_seconds"]
                shown = sum(e["dur"] for e in mine if e["cat"] == "idle") * 1e-6
                self.assertGreater(reported, 0, (pid, step))
                self.assertAlmostEqual(shown, reported, delta=0.05 * reported,
                                       msg="stage %d step %d" % (pid - 1, step))
                # Actions of a step follow each other (program order, one thread).
                actions = [e for e in mine if e["cat"] not in ("step", "idle")]
                for a, b in zip(actions, actions[1:]):
                    self.assertGreaterEqual(b["ts"], a["ts"] + a["dur"] - 1)
            # The last step is traced, so the bubble the coordinator reports for it is the one
            # the trace shows.
            last = metrics[pid - 1]
            self.assertEqual(int(last["step"]), STEPS)
            shown = sum(e["dur"] for e in events if e["pid"] == pid and e["cat"] == "idle"
                        and e["args"]["step"] == STEPS) * 1e-6
            self.assertAlmostEqual(shown, last["idle_seconds"], delta=0.05 * last["idle_seconds"])

        # After a coordinator restart the trace is still there.
        self.c.stop_coordinator()
        self.c.start_coordinator()
        _, again = self.write_trace(job)
        self.assertEqual(len(again["traceEvents"]), len(trace["traceEvents"]))

        # A job with no traced step yet (it waits for 3 workers): a one-line error, exit 1.
        waiting = self.c.submit(cluster.spec_yaml("waits", cluster.SMALL_MLP, 64, 16, 3,
                                                  max_steps=2))
        code, out, err = self.c.ctl("trace", waiting, "-o", os.path.join(self.c.dir, "w.json"),
                                    check=False)
        self.assertEqual(code, 1, err)
        self.assertEqual(err, "dapplectl: job %s has no traced steps yet (workers trace a run's "
                              "first step and every --trace-every-steps-th step; 0 turns tracing "
                              "off)\n" % waiting)
        self.assertFalse(os.path.exists(os.path.join(self.c.dir, "w.json")))


if __name__ == "__main__":
    unittest.main()
