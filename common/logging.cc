#include "common/logging.h"

#include <unistd.h>

#include "spdlog/sinks/stdout_sinks.h"

namespace dapple {

void InitLogging(const std::string& role, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("dapple");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e [%^%l%$] " + role + "[" + std::to_string(getpid()) +
                      "] %v");
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace dapple
