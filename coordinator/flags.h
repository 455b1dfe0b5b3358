// The command-line flags of dapple-coordinator and their rules (docs/coordinator.md, "Flags").
// main.cc lets CLI11 collect the flags as text and ValidateFlags decide: one place for every
// rule, with messages that name the flag, the rule and the value.
#ifndef DAPPLE_COORDINATOR_FLAGS_H_
#define DAPPLE_COORDINATOR_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dapple::coordinator {

// Heartbeat interval told to workers, ms.
inline constexpr int64_t kMinHeartbeatIntervalMs = 10;
inline constexpr int64_t kMaxHeartbeatIntervalMs = 60'000;
// Silence after which a worker is DEAD, ms; must also exceed 2x the heartbeat interval, so
// one late heartbeat does not kill a healthy worker.
inline constexpr int64_t kMinWorkerTimeoutMs = 100;
inline constexpr int64_t kMaxWorkerTimeoutMs = 3'600'000;

// The flags as typed (defaults as in docs/coordinator.md).
struct RawFlags {
  std::string listen = "0.0.0.0:7600";
  std::string db = "dapple.db";
  std::string heartbeat_interval_ms = "500";
  std::string worker_timeout_ms = "5000";
  std::string log_level = "info";
  std::string port_file;  // empty: none
};

struct Flags {
  std::string listen;  // HOST:PORT, PORT in 0..65535
  std::string db;      // non-empty
  int64_t heartbeat_interval_ms = 0;
  int64_t worker_timeout_ms = 0;
  std::string log_level;  // trace | debug | info | warn | error | off
  std::string port_file;
};

// Checks every rule; kInvalidArgument with a one-line message for the first broken one, e.g.
// "--worker-timeout-ms must be at least 100 (ms), got 0",
// "--heartbeat-interval-ms must be an integer number of ms, got '1.5'",
// "--worker-timeout-ms must exceed 2x --heartbeat-interval-ms (2 x 500 = 1000 ms), got 900",
// "--listen must be HOST:PORT with PORT in 0..65535, got '127.0.0.1:99999'",
// "--db must name a file", "--log-level must be one of trace, debug, info, warn, error, off;
// got 'loud'".
absl::StatusOr<Flags> ValidateFlags(const RawFlags& raw);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_FLAGS_H_
