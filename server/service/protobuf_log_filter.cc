#include "server/service/protobuf_log_filter.h"

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log_limiter.h"
#include "google/protobuf/stubs/logging.h"

namespace batchd::server {
namespace {

using google::protobuf::LogLevel;

common::LogLimiter& Limiter() {
  static common::LogLimiter* limiter =
      new common::LogLimiter(kProtobufLogBurst, kProtobufLogInterval);
  return *limiter;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      return "INFO";
    case google::protobuf::LOGLEVEL_WARNING:
      return "WARNING";
    case google::protobuf::LOGLEVEL_ERROR:
      return "ERROR";
    default:
      return "FATAL";
  }
}

// Protobuf's own format: "[libprotobuf ERROR file.cc:618] message", one
// write per line.
void Filter(LogLevel level, const char* filename, int line,
            const std::string& message) {
  uint64_t dropped = 0;
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      !Limiter().Allow(absl::Now(), &dropped)) {
    return;
  }
  std::string text = absl::StrCat("[libprotobuf ", LevelName(level), " ",
                                  filename == nullptr ? "" : filename, ":",
                                  line, "] ", message);
  if (dropped != 0) {
    absl::StrAppend(&text, " (", dropped, " more libprotobuf lines not logged)");
  }
  text.push_back('\n');
  std::fputs(text.c_str(), stderr);
}

}  // namespace

void InstallProtobufLogFilter() {
  static std::once_flag installed;
  std::call_once(installed, [] { google::protobuf::SetLogHandler(Filter); });
}

}  // namespace batchd::server
