#include "worker/daemon/worker_options.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/worker_name.h"
#include "worker/comm/delay_transport.h"
#include "worker/device/device.h"

namespace dapple::worker {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::Status CheckAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return Invalid(absl::StrFormat(
        "--coordinator '%s' must be HOST:PORT with PORT in 1..65535 (e.g. 127.0.0.1:7600)",
        address));
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) {
  if (name.empty() || ValidWorkerName(name)) return absl::OkStatus();
  return Invalid(
      absl::StrFormat("--name '%s' must be %s", absl::CHexEscape(name), kWorkerNameRule));
}

absl::Status CheckDumpDir(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  // Prove now that files can be created there; the alternative is a job failing after training.
  const std::string probe = absl::StrCat(dir, "/.dapple-worker-probe-", getpid());
  FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) {
    return Invalid(absl::StrFormat("--dump-dir %s: cannot create files there (%s)", dir,
                                   std::strerror(errno)));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return absl::OkStatus();
}

absl::Status CheckSeconds(const char* flag, absl::Duration d) {
  if (d < absl::Seconds(1) || d > absl::Hours(24)) {
    return Invalid(
        absl::StrFormat("%s %s must be between 1 s and 24 h", flag, absl::FormatDuration(d)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateWorkerOptions(const WorkerOptions& o) {
  if (absl::Status s = CheckAddress(o.coordinator); !s.ok()) return s;
  if (absl::Status s = CheckName(o.name); !s.ok()) return s;
  if (o.devices.empty()) {
    return Invalid("--devices needs at least one device (cpu or cuda:N)");
  }
  std::set<std::string> seen;
  for (const std::string& d : o.devices) {
    if (absl::StatusOr<DeviceId> id = ParseDevice(d); !id.ok()) {
      return Invalid(absl::StrCat("--devices ", id.status().message()));
    }
    if (!seen.insert(d).second) {
      return Invalid(absl::StrFormat("--devices lists '%s' twice", d));
    }
  }
  if (absl::Status s = CheckDumpDir(o.dump_dir); !s.ok()) return s;
  if (absl::Status s = CheckSeconds("--transport-timeout-s", o.transport_timeout); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSeconds("--rendezvous-timeout-s", o.rendezvous_timeout); !s.ok()) {
    return s;
  }
  if (o.comm_delay_max < absl::ZeroDuration() || o.comm_delay_max > DelayTransport::kMaxDelay) {
    return Invalid(absl::StrFormat("--comm-delay-max-ms %d must be in 0..%d (0: no delay)",
                                   absl::ToInt64Milliseconds(o.comm_delay_max),
                                   absl::ToInt64Milliseconds(DelayTransport::kMaxDelay)));
  }
  return absl::OkStatus();
}

absl::Status ValidateLogLevel(const std::string& level) {
  for (const char* l : kLogLevels) {
    if (level == l) return absl::OkStatus();
  }
  return Invalid(absl::StrFormat("--log-level '%s' must be one of %s", level, kLogLevelList));
}

}  // namespace dapple::worker
