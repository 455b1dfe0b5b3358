// Checks a dapple-worker's options before it starts, so a bad flag is a one-line error at
// start-up instead of a failure at the end of someone's job.
#ifndef DAPPLE_WORKER_DAEMON_WORKER_OPTIONS_H_
#define DAPPLE_WORKER_DAEMON_WORKER_OPTIONS_H_

#include "absl/status/status.h"
#include "worker/daemon/worker_daemon.h"

namespace dapple::worker {

// kInvalidArgument naming the flag, the value and the rule:
//  --coordinator  HOST:PORT with a non-empty host and PORT in 1..65535
//  --name         empty (the coordinator picks one) or 1-63 of [a-z0-9-_.]
//  --devices      at least one; each "cpu" or "cuda:N" (N in 0..1023, worker/device/device.h),
//                 no repeats. Only the syntax: whether cuda:N exists on this machine is checked
//                 after flag parsing by ResolveDevices (device.h), which --cpu-fallback relaxes.
//  --dump-dir     empty, or an existing directory this process can create files in
//  --transport-timeout-s, --rendezvous-timeout-s  between 1 s and 1 day
//  --comm-delay-max-ms  0..10000 ms (DelayTransport::kMaxDelay)
absl::Status ValidateWorkerOptions(const WorkerOptions& options);

// "trace" | "debug" | "info" | "warn" | "error"; kInvalidArgument otherwise.
absl::Status ValidateLogLevel(const std::string& level);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_OPTIONS_H_
