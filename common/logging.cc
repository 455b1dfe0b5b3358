#include "common/logging.h"

#include <unistd.h>

#include "spdlog/sinks/stdout_sinks.h"

namespace dapple {

const std::shared_ptr<JobLogCapture>& ProcessJobLogCapture() {
  static const auto* capture = new std::shared_ptr<JobLogCapture>(new JobLogCapture());
  return *capture;
}

void InitLogging(const std::string& role, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("dapple");
  // Added before the logger is shared: sinks are not to be changed once threads log.
  logger->sinks().push_back(ProcessJobLogCapture());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e [%^%l%$] " + role + "[" + std::to_string(getpid()) +
                      "] %v");
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace dapple
