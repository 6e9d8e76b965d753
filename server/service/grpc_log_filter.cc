#include "server/service/grpc_log_filter.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log_limiter.h"
#include "grpc/support/log.h"

namespace batchd::server {
namespace {

std::atomic<Counter*> g_counter{nullptr};

common::LogLimiter& HandshakeLimiter() {
  static common::LogLimiter* limiter =
      new common::LogLimiter(kTlsLogBurst, kTlsLogInterval);
  return *limiter;
}

common::LogLimiter& ErrorLimiter() {
  static common::LogLimiter* limiter =
      new common::LogLimiter(kGrpcErrorLogBurst, kGrpcErrorLogInterval);
  return *limiter;
}

char SeverityLetter(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return 'D';
    case GPR_LOG_SEVERITY_INFO:
      return 'I';
    default:
      return 'E';
  }
}

// gRPC's own format: "E1206 09:57:22.156997 12345 file.cc:1501] message".
void Write(const gpr_log_func_args* args, absl::string_view suffix) {
  const char* file = args->file == nullptr ? "" : args->file;
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  const std::string time = absl::FormatTime(
      "%m%d %H:%M:%E6S", absl::Now(), absl::UTCTimeZone());
  std::fprintf(stderr, "%c%s %7ld %s:%d] %s%s\n",
               SeverityLetter(args->severity), time.c_str(),
               static_cast<long>(gettid()), file, args->line,
               args->message == nullptr ? "" : args->message,
               std::string(suffix).c_str());
}

void Filter(gpr_log_func_args* args) {
  uint64_t dropped = 0;
  if (!IsHandshakeFailure(args->file == nullptr ? "" : args->file,
                          args->message == nullptr ? "" : args->message)) {
    if (args->severity != GPR_LOG_SEVERITY_ERROR) {
      Write(args, "");
    } else if (ErrorLimiter().Allow(absl::Now(), &dropped)) {
      Write(args, dropped == 0 ? std::string()
                               : absl::StrCat(" (", dropped,
                                              " more gRPC error lines not "
                                              "logged)"));
    }
    return;
  }
  if (Counter* counter = g_counter.load(std::memory_order_acquire)) {
    counter->Increment();
  }
  if (!HandshakeLimiter().Allow(absl::Now(), &dropped)) return;
  Write(args, dropped == 0
                  ? std::string()
                  : absl::StrCat(" (", dropped,
                                 " more failed handshakes not logged; see "
                                 "batchd_tls_handshake_failures_total)"));
}

}  // namespace

bool IsHandshakeFailure(absl::string_view file, absl::string_view message) {
  return (absl::StrContains(file, "ssl_transport_security") ||
          absl::StrContains(file, "security_handshaker") ||
          absl::StrContains(file, "handshaker")) &&
         absl::StrContains(message, "andshake");
}

void InstallGrpcLogFilter(Counter* tls_handshake_failures) {
  g_counter.store(tls_handshake_failures, std::memory_order_release);
  static std::once_flag installed;
  std::call_once(installed, [] { gpr_set_log_function(Filter); });
}

void RemoveGrpcLogCounter(Counter* counter) {
  Counter* expected = counter;
  g_counter.compare_exchange_strong(expected, nullptr);
}

}  // namespace batchd::server
