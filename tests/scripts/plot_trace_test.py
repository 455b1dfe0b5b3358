"""scripts/plot_trace.py on input that is not a trace: one line naming the file and what is
wrong, exit status 1, no traceback (a user's fresh install has no matplotlib; these checks come
before it is needed)."""
import json
import os
import subprocess
import tempfile
import unittest

SOURCE = os.environ.get("DAPPLE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(SOURCE, "scripts", "plot_trace.py")


def run(*args):
    return subprocess.run(["/usr/bin/python3", SCRIPT] + list(args), capture_output=True,
                          text=True, timeout=60)


class PlotTraceInputTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="plot-trace-")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check_refused(self, path, want):
        r = run(path, os.path.join(self.dir, "out.png"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn(want, r.stderr)
        self.assertIn(path, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out.png")))

    def test_a_missing_file(self):
        self.check_refused(os.path.join(self.dir, "none.json"), "cannot read")

    def test_an_empty_file_and_other_json(self):
        self.check_refused(self.write("empty.json", ""), "is not a trace")
        self.check_refused(self.write("list.json", "[1, 2]"), "has no traceEvents list")
        self.check_refused(self.write("bad.json", '{"traceEvents": 3}'), "has no traceEvents list")

    def test_a_trace_without_a_step_of_every_rank(self):
        events = {"traceEvents": [1, {"ph": "M"}, {"ph": "X", "pid": 1, "tid": 1, "ts": 0,
                                                    "dur": 1, "cat": "forward", "args": {}}]}
        r = run(self.write("t.json", json.dumps(events)), os.path.join(self.dir, "out.png"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn("no step was traced by every rank", r.stderr)

    def test_help_shows_the_whole_usage(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Without --step it draws the newest step", r.stdout)


if __name__ == "__main__":
    unittest.main()
