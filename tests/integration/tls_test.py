"""TLS on the coordinator's gRPC port (issue 16, "TLS"), with certificates made by openssl in
the test: dapplectl and workers connect with the CA and a job runs; a wrong CA, a plain-text
client, and (with mutual TLS) a worker without a client certificate are refused with clear
messages. Real processes on 127.0.0.1; the certificates' SAN is IP 127.0.0.1.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from cluster import Cluster, SMALL_MLP, spec_yaml  # noqa: E402

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
            name + ".pem", "-days", "2", "-subj", "/CN=" + name, cwd=d)
    return os.path.join(d, name + ".pem")


def make_cert(d, ca, name, san):
    """A certificate for `name` signed by CA `ca` (files ca.pem / ca.key in d)."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
            name + ".csr", "-subj", "/CN=" + name, cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\n" % san)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext",
            cwd=d)
    return os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.mkdtemp(prefix="dapple-tls-")
        d = cls.certs
        cls.ca = make_ca(d, "ca")
        cls.wrong_ca = make_ca(d, "wrong-ca")
        cls.server_cert, cls.server_key = make_cert(d, "ca", "coordinator",
                                                    "IP:127.0.0.1,DNS:localhost")
        cls.client_cert, cls.client_key = make_cert(d, "ca", "worker", "DNS:worker")

    def ctl(self, c, *args, ca=None):
        env = dict(os.environ, DAPPLE_COORDINATOR=c.address)
        env.pop("DAPPLE_CA", None)
        if ca:
            env["DAPPLE_CA"] = ca
        return subprocess.run([cluster.DAPPLECTL, "--timeout", "5"] + list(args), env=env,
                              capture_output=True, text=True, timeout=60)

    def test_tls_job_runs_and_wrong_or_missing_ca_is_refused(self):
        c = Cluster(workers=2, coordinator_args=["--tls-cert", self.server_cert,
                                                 "--tls-key", self.server_key],
                    worker_args=["--ca", self.ca])
        os.environ["DAPPLE_CA"] = self.ca  # the Cluster's own dapplectl calls
        os.environ["DAPPLE_TOKEN"] = c.admin_token  # and this test's
        try:
            c.wait_workers(2)
            job = c.submit(spec_yaml("tls", SMALL_MLP, 64, 32, 2, max_steps=4))
            j = c.wait_state(job, TERMINAL, timeout=120)
            self.assertEqual(j["state"], "SUCCEEDED", j.get("message"))
            self.assertIn("TLS with", c.log("coordinator"))

            r = self.ctl(c, "list", ca=self.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(job, r.stdout)
            # A CA that did not sign the coordinator's certificate.
            r = self.ctl(c, "list", ca=self.wrong_ca)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("TLS: the coordinator's certificate is not signed by the --ca file",
                          r.stderr)
            # A plain-text client (loopback allows it on its side; the server does not).
            r = self.ctl(c, "list")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("if the coordinator serves TLS, give --ca FILE or DAPPLE_CA", r.stderr)
            # A plain-text worker (no --ca, no DAPPLE_CA) never registers.
            c.worker_args = []
            os.environ.pop("DAPPLE_CA")
            c.add_worker(name="plain", log_name="plain")
            os.environ["DAPPLE_CA"] = self.ca
            c.wait_log("worker-plain", "cannot register with the coordinator", timeout=30)
            # ... and says why (it once logged only "Socket closed", retrying forever).
            c.wait_log("worker-plain", "if the coordinator serves TLS, give --ca FILE (or "
                       "DAPPLE_CA)", timeout=10)
            ws = [w["id"] for w in c.workers_json()]
            self.assertNotIn("plain", ws)
            self.assertEqual(len(ws), 2, ws)
        finally:
            os.environ.pop("DAPPLE_CA", None)
            os.environ.pop("DAPPLE_TOKEN", None)
            c.close()

    def test_mutual_tls_refuses_a_worker_without_a_client_certificate(self):
        c = Cluster(workers=0, coordinator_args=["--tls-cert", self.server_cert,
                                                 "--tls-key", self.server_key,
                                                 "--tls-client-ca", self.ca])
        os.environ["DAPPLE_CA"] = self.ca
        os.environ["DAPPLE_TOKEN"] = c.admin_token
        try:
            # dapplectl needs a client certificate too once the port requires one.
            r = self.ctl(c, "workers", ca=self.ca)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("requires client certificates (mutual TLS), give --tls-cert and "
                          "--tls-key", r.stderr)
            r = subprocess.run([cluster.DAPPLECTL, "--coordinator", c.address, "--ca", self.ca,
                                "--tls-cert", self.client_cert, "--tls-key", self.client_key,
                                "workers"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            c.worker_args = ["--ca", self.ca]
            c.add_worker(name="nocert", log_name="nocert")
            c.worker_args = ["--ca", self.ca, "--tls-cert", self.client_cert,
                             "--tls-key", self.client_key]
            c.add_worker(name="withcert", log_name="withcert")
            deadline = time.time() + 20
            names = []
            while time.time() < deadline:
                r = subprocess.run([cluster.DAPPLECTL, "--coordinator", c.address, "--ca", self.ca,
                                    "--tls-cert", self.client_cert, "--tls-key", self.client_key,
                                    "workers", "-o", "json"], capture_output=True, text=True,
                                   timeout=60)
                names = [w.get("id", "") for w in json.loads(r.stdout or "{}").get("workers", [])]
                if "withcert" in names:
                    break
                time.sleep(0.2)
            self.assertIn("withcert", names)
            self.assertNotIn("nocert", names)
            # The worker without one says what to give (it used to log only "Socket closed").
            c.wait_log("worker-nocert", "if the coordinator requires client certificates "
                       "(mutual TLS), give --tls-cert and --tls-key", timeout=30)
        finally:
            os.environ.pop("DAPPLE_CA", None)
            os.environ.pop("DAPPLE_TOKEN", None)
            c.close()

    def test_a_broken_certificate_renewal_keeps_the_previous_pair_served(self):
        """An operator's renewal that leaves the files unusable (a truncated certificate) must
        not cut the cluster off: gRPC re-reads the files every 10 s and took anything; the
        coordinator now keeps serving the last working pair, says which file is wrong, and takes
        the next working pair (tls_file_guard.h)."""
        live = tempfile.mkdtemp(prefix="dapple-tls-live-")
        cert, key = os.path.join(live, "cert.pem"), os.path.join(live, "key.pem")
        for src, dst in ((self.server_cert, cert), (self.server_key, key)):
            with open(src) as f, open(dst, "w") as out:
                out.write(f.read())
        c = Cluster(workers=0, coordinator_args=["--tls-cert", cert, "--tls-key", key])
        os.environ["DAPPLE_TOKEN"] = c.admin_token
        try:
            r = self.ctl(c, "workers", ca=self.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(cert, "w") as f:
                f.write("-----BEGIN CERTIFICATE-----\nMIIB\n")  # cut short
            c.wait_log("coordinator", "not usable, still serving the previous ones", timeout=15)
            self.assertIn("--tls-cert %s: not a PEM certificate" % cert, c.log("coordinator"))
            time.sleep(12)  # past gRPC's own re-read of what it serves
            r = self.ctl(c, "workers", ca=self.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            # A renewed pair from the same CA is taken, and works.
            new_cert, new_key = make_cert(self.certs, "ca", "coordinator-renewed",
                                          "IP:127.0.0.1,DNS:localhost")
            with open(new_key) as f, open(key, "w") as out:
                out.write(f.read())
            with open(new_cert) as f, open(cert, "w") as out:
                out.write(f.read())
            c.wait_log("coordinator", "serving --tls-cert %s and its key as they are now" % cert,
                       timeout=15)
            time.sleep(12)
            r = self.ctl(c, "workers", ca=self.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            os.environ.pop("DAPPLE_TOKEN", None)
            c.close()

    def test_bad_tls_flags_are_refused_at_start(self):
        d = tempfile.mkdtemp(prefix="dapple-tls-flags-")
        r = subprocess.run([cluster.COORDINATOR, "--listen", "127.0.0.1:0", "--db",
                            os.path.join(d, "x.db"), "--tls-cert", "/no/cert.pem", "--tls-key",
                            self.server_key], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--tls-cert /no/cert.pem: No such file or directory", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "x.db")), "nothing opened before")
        r = subprocess.run([cluster.COORDINATOR, "--listen", "0.0.0.0:0", "--db",
                            os.path.join(d, "x.db")], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("is not a loopback address: give --tls-cert and --tls-key, or --plaintext",
                      r.stderr)
        # A key that is not the certificate's, a key given as the certificate: refused at start
        # (gRPC alone would log "Invalid private key" and serve nobody).
        ca_key = os.path.join(self.certs, "ca.key")
        for cert, key, says in ((self.server_cert, ca_key, "is not the private key of --tls-cert"),
                                (self.server_key, self.server_key, "not a PEM certificate")):
            r = subprocess.run([cluster.COORDINATOR, "--listen", "127.0.0.1:0", "--db",
                                os.path.join(d, "y.db"), "--tls-cert", cert, "--tls-key", key],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)
        # Clients: a key as the CA, a client key that is not its certificate's, --plaintext with
        # a CA.
        for args, says in ((["--ca", ca_key], "--ca %s: not a PEM certificate" % ca_key),
                           (["--ca", self.ca, "--tls-cert", self.client_cert, "--tls-key",
                             self.server_key], "is not the private key of --tls-cert"),
                           (["--ca", self.ca, "--plaintext"], "contradict each other")):
            r = subprocess.run([cluster.DAPPLECTL, "--coordinator", "127.0.0.1:1"] + args +
                               ["list"], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)
            r = subprocess.run([cluster.WORKER, "--coordinator", "127.0.0.1:1"] + args,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)


if __name__ == "__main__":
    unittest.main()
