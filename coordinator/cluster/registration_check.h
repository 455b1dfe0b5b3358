// What a worker's registration (RegisterWorkerRequest) may say, checked before the registry or
// the planner sees it. A peer sets every field, and every user sees name, hostname and memory in
// `dapplectl workers`; a security review registered a name and hostname with newlines and
// quotes (forged rows of `dapplectl workers`), a name like "../../etc", 1000 TiB of memory and a
// host compute capacity of 1e9 cores (to attract jobs), all accepted.
#ifndef DAPPLE_COORDINATOR_CLUSTER_REGISTRATION_CHECK_H_
#define DAPPLE_COORDINATOR_CLUSTER_REGISTRATION_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "dapple/v1/worker.pb.h"

namespace dapple::coordinator {

// The largest device memory a registration may report: 64 TiB (a host's RAM for cpu workers).
inline constexpr int64_t kMaxReportedDeviceMemoryBytes = int64_t{1} << 46;
// The largest host compute capacity (cores' worth) a registration may report.
inline constexpr double kMaxReportedHostCapacity = 4096;

// OK, or kInvalidArgument naming the first field that breaks its rule, its value (C-escaped,
// at most 80 characters of it) and the rule:
//   name               empty or common/worker_name.h kWorkerNameRule
//   hostname           at most 253 characters of A-Z a-z 0-9 - . _ (empty: unknown)
//   pid                >= 0
//   devices            at most 64, each 1-32 characters of a-z 0-9 : (cpu, cuda:0)
//   device_memory_bytes  0..kMaxReportedDeviceMemoryBytes
//   host_compute_capacity  at most kMaxReportedHostCapacity (smaller or non-finite values
//                      mean "unknown": the service ignores them)
//   instance_key, measuring_request_id  at most 128 printable ASCII characters
//   reattach.worker_id  empty or a worker name; reattach.job_id at most 128 printable characters
// Pure; thread-safe.
absl::Status CheckRegistration(const v1::RegisterWorkerRequest& request);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_CLUSTER_REGISTRATION_CHECK_H_
