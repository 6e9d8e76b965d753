// batchd-latency-proxy: testing's HTTP fault proxy as a program, adding a
// fixed latency to every request to an HTTP server on the loopback, for
// bench/remote.sh (the kernel here has no netem). Runs until SIGTERM.
//   batchd-latency-proxy --upstream_port 8080 --latency_ms 20 --port_file F
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "testing/http_fault_proxy.h"

ABSL_FLAG(int, upstream_port, 0, "the server's port on 127.0.0.1");
ABSL_FLAG(int, latency_ms, 20, "added before each request is forwarded");
ABSL_FLAG(std::string, port_file, "", "written with the proxy's port");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_upstream_port) <= 0) {
    std::fprintf(stderr, "batchd-latency-proxy: --upstream_port is required\n");
    return 2;
  }
  // Blocked here, taken by sigwait below: the proxy's threads never see them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto proxy = batchd::testing::HttpFaultProxy::Start(
      absl::GetFlag(FLAGS_upstream_port));
  if (!proxy.ok()) {
    std::fprintf(stderr, "batchd-latency-proxy: %s\n",
                 proxy.status().ToString().c_str());
    return 1;
  }
  (*proxy)->SetLatency(absl::Milliseconds(absl::GetFlag(FLAGS_latency_ms)));
  (*proxy)->Always(batchd::testing::HttpFault::kLatency);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    const std::string path = absl::GetFlag(FLAGS_port_file);
    std::ofstream(path + ".tmp") << (*proxy)->port() << "\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  std::printf("%d requests delayed\n", (*proxy)->requests());
  return 0;
}
