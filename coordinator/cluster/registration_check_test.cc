#include "coordinator/cluster/registration_check.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::RegisterWorkerRequest Genuine() {
  v1::RegisterWorkerRequest r;
  r.set_hostname("node-1.cluster.local");
  r.set_pid(3219);
  r.set_name("gpu-a_1.x");
  r.add_devices("cuda:0");
  r.set_device_memory_bytes(int64_t{140} << 30);
  r.set_host_compute_capacity(2.0);
  r.set_instance_key("0123456789abcdef0123456789abcdef");
  return r;
}

void ExpectRefused(const v1::RegisterWorkerRequest& r, const std::string& message) {
  const absl::Status s = CheckRegistration(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
}

TEST(RegistrationCheckTest, WhatAWorkerSendsPasses) {
  EXPECT_TRUE(CheckRegistration(Genuine()).ok()) << CheckRegistration(Genuine());
  v1::RegisterWorkerRequest unnamed = Genuine();
  unnamed.clear_name();
  unnamed.clear_instance_key();
  unnamed.set_host_compute_capacity(std::numeric_limits<double>::quiet_NaN());  // unknown
  EXPECT_TRUE(CheckRegistration(unnamed).ok());
}

// The values a security review registered with the join token.
TEST(RegistrationCheckTest, RefusesWhatAPeerForged) {
  v1::RegisterWorkerRequest r = Genuine();
  r.set_name("rogue\n\"x");
  ExpectRefused(r,
                "registration: name 'rogue\\n\\\"x' must be 1-63 characters of a-z 0-9 - _ ., "
                "starting with a letter or digit");
  r.set_name("../../etc");
  ExpectRefused(r,
                "registration: name '../../etc' must be 1-63 characters of a-z 0-9 - _ ., "
                "starting with a letter or digit");
  r = Genuine();
  r.set_hostname("evil\"} 1\ndapple_jobs{state=\"pwned\"} 99\n#");
  ExpectRefused(r,
                "registration: hostname 'evil\\\"} 1\\ndapple_jobs{state=\\\"pwned\\\"} 99\\n#' "
                "must be at most 253 characters of A-Z a-z 0-9 - . _");
  r = Genuine();
  r.set_device_memory_bytes(1099511627776000);
  ExpectRefused(r,
                "registration: device_memory_bytes '1099511627776000' must be 0 (unknown) to "
                "70368744177664 (64 TiB)");
  r = Genuine();
  r.set_host_compute_capacity(1e9);
  ExpectRefused(r, "registration: host_compute_capacity '1e+09' must be at most 4096 cores");
  r = Genuine();
  r.set_pid(-1);
  ExpectRefused(r, "registration: pid '-1' must be >= 0");
  r = Genuine();
  r.add_devices("cuda 1; rm");
  ExpectRefused(r,
                "registration: devices 'cuda 1; rm' must be 1-32 characters of a-z 0-9 : "
                "(cpu, cuda:0)");
  r = Genuine();
  r.set_instance_key(std::string(200, 'a'));
  ExpectRefused(r, "registration: instance_key '" + std::string(80, 'a') +
                       "...' must be at most 128 printable ASCII characters");
  r = Genuine();
  r.mutable_reattach()->set_worker_id("Bad Id");
  ExpectRefused(r,
                "registration: reattach.worker_id 'Bad Id' must be 1-63 characters of a-z 0-9 - "
                "_ ., starting with a letter or digit");
}

}  // namespace
}  // namespace dapple::coordinator
