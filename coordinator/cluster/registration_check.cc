#include "coordinator/cluster/registration_check.h"

#include <cmath>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/worker_name.h"

namespace dapple::coordinator {
namespace {

absl::Status Refuse(absl::string_view field, absl::string_view value, absl::string_view rule) {
  const bool long_value = value.size() > 80;
  return absl::InvalidArgumentError(absl::StrCat("registration: ", field, " '",
                                                 absl::CHexEscape(value.substr(0, 80)),
                                                 long_value ? "...'" : "'", " must be ", rule));
}

bool AllOf(absl::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

bool HostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}
bool DeviceChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ':'; }
bool Printable(char c) { return c >= 0x21 && c <= 0x7e; }

absl::Status CheckText(absl::string_view field, absl::string_view value) {
  if (value.size() <= 128 && AllOf(value, &Printable)) return absl::OkStatus();
  return Refuse(field, value, "at most 128 printable ASCII characters");
}

}  // namespace

absl::Status CheckRegistration(const v1::RegisterWorkerRequest& request) {
  if (!request.name().empty() && !ValidWorkerName(request.name())) {
    return Refuse("name", request.name(), kWorkerNameRule);
  }
  const std::string& host = request.hostname();
  if (host.size() > 253 || !AllOf(host, &HostChar)) {
    return Refuse("hostname", host, "at most 253 characters of A-Z a-z 0-9 - . _");
  }
  if (request.pid() < 0) return Refuse("pid", absl::StrCat(request.pid()), ">= 0");
  if (request.devices_size() > 64) {
    return Refuse("devices", absl::StrCat(request.devices_size(), " devices"), "at most 64");
  }
  for (const std::string& d : request.devices()) {
    if (d.empty() || d.size() > 32 || !AllOf(d, &DeviceChar)) {
      return Refuse("devices", d, "1-32 characters of a-z 0-9 : (cpu, cuda:0)");
    }
  }
  if (request.device_memory_bytes() < 0 ||
      request.device_memory_bytes() > kMaxReportedDeviceMemoryBytes) {
    return Refuse("device_memory_bytes", absl::StrCat(request.device_memory_bytes()),
                  absl::StrCat("0 (unknown) to ", kMaxReportedDeviceMemoryBytes, " (64 TiB)"));
  }
  if (std::isfinite(request.host_compute_capacity()) &&
      request.host_compute_capacity() > kMaxReportedHostCapacity) {
    return Refuse("host_compute_capacity", absl::StrCat(request.host_compute_capacity()),
                  absl::StrCat("at most ", kMaxReportedHostCapacity, " cores"));
  }
  if (absl::Status s = CheckText("instance_key", request.instance_key()); !s.ok()) return s;
  if (absl::Status s = CheckText("measuring_request_id", request.measuring_request_id()); !s.ok()) {
    return s;
  }
  if (request.has_reattach()) {
    const std::string& claimed = request.reattach().worker_id();
    if (!claimed.empty() && !ValidWorkerName(claimed)) {
      return Refuse("reattach.worker_id", claimed, kWorkerNameRule);
    }
    if (absl::Status s = CheckText("reattach.job_id", request.reattach().job_id()); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace dapple::coordinator
