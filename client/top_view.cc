#include "client/top_view.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/daemon_verdict.h"

namespace batchd::client {
namespace {

using batchd::v1::ServerStatus;

const ServerStatus* FindPrevious(const std::vector<DaemonSample>* previous,
                                 const std::string& endpoint) {
  if (previous == nullptr) return nullptr;
  for (const DaemonSample& sample : *previous) {
    if (sample.endpoint == endpoint && sample.status.ok()) {
      return &*sample.status;
    }
  }
  return nullptr;
}

// Milliseconds per image (read, decode, transform, and augment once the
// daemon has augmented) and per batch (send), over the interval since
// `before` when it shows progress, else since start.
std::string StageLine(const ServerStatus& now, const ServerStatus* before) {
  const batchd::v1::StageSeconds& b = now.stage_seconds();
  batchd::v1::StageSeconds a;
  uint64_t images = now.samples_decoded();
  uint64_t batches = 0;
  for (const auto& job : now.jobs()) batches += job.batches_sent();
  const char* over = "avg";
  if (before != nullptr && now.samples_decoded() > before->samples_decoded()) {
    a = before->stage_seconds();
    images = now.samples_decoded() - before->samples_decoded();
    uint64_t batches_before = 0;
    for (const auto& job : before->jobs()) batches_before += job.batches_sent();
    batches = batches >= batches_before ? batches - batches_before : 0;
    over = "now";
  }
  if (images == 0) return "  stages: no samples decoded yet";
  const double per_image = 1e3 / static_cast<double>(images);
  std::string line = absl::StrFormat(
      "  ms/img read %.2f decode %.2f transform %.2f", (b.read() - a.read()) *
      per_image, (b.decode() - a.decode()) * per_image,
      (b.transform() - a.transform()) * per_image);
  if (b.augment() > 0) {
    absl::StrAppendFormat(&line, " augment %.2f",
                          (b.augment() - a.augment()) * per_image);
  }
  if (batches > 0) {
    absl::StrAppendFormat(&line, "  ms/batch send %.2f",
                          (b.send() - a.send()) * 1e3 / batches);
  }
  absl::StrAppend(&line, " (", over, ")");
  return line;
}

}  // namespace

std::string FormatUptime(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  if (s >= 86400) return absl::StrFormat("%dd%02dh", s / 86400, s % 86400 / 3600);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::vector<std::string> RenderTop(const std::vector<DaemonSample>& samples,
                                   const std::vector<DaemonSample>* previous,
                                   int width, int height) {
  width = std::max(width, 20);
  height = std::max(height, 3);
  std::vector<std::string> lines;
  int reachable = 0;
  for (const DaemonSample& sample : samples) reachable += sample.status.ok();
  lines.push_back(absl::StrFormat(
      "batchd top: %d daemon%s, %d reachable",
      samples.size(), samples.size() == 1 ? "" : "s", reachable));
  lines.push_back(absl::StrFormat("%-22s %7s %4s %5s %6s %8s %8s %6s",
                                  "DAEMON", "UP", "WRK", "BUSY", "QUEUE",
                                  "IMG/S", "MB/S", "SUBST"));
  for (const DaemonSample& sample : samples) {
    if (!sample.status.ok()) {
      lines.push_back(absl::StrFormat(
          "%-22s unreachable: %s", sample.endpoint,
          std::string(sample.status.status().message())));
      continue;
    }
    const ServerStatus& s = *sample.status;
    double images_per_second = 0, bytes_per_second = 0;
    for (const auto& job : s.jobs()) {
      images_per_second += job.images_per_second();
      bytes_per_second += job.bytes_per_second();
    }
    lines.push_back(absl::StrFormat(
        "%-22s %7s %4d %4.0f%% %6d %8.1f %8.1f %6d", sample.endpoint,
        FormatUptime(s.uptime_seconds()), s.workers(),
        100 * s.busy_fraction(), s.queued_samples(), images_per_second,
        bytes_per_second / 1e6, s.samples_substituted()));
    lines.push_back(
        StageLine(s, FindPrevious(previous, sample.endpoint)));
    // The daemon's verdict, as the live page on its metrics port shows it;
    // the frame is ASCII.
    lines.push_back(absl::StrCat(
        "  ", absl::StrReplaceAll(common::JudgeDaemon(s).line,
                                  {{"\u2192", "->"}})));
    if (s.autoscale().enabled()) {
      const batchd::v1::AutoscaleStatus& a = s.autoscale();
      lines.push_back(absl::StrFormat(
          "  autoscale %d..%d: %d grows, %d shrinks, %d step backs; "
          "demand/capacity %.2f",
          a.min_workers(), a.max_workers(), a.grows(), a.shrinks(),
          a.step_backs(), s.capacity_demand_ratio()));
      if (!a.last_change().empty()) {
        lines.push_back(absl::StrCat(
            "  ", FormatUptime(a.last_change_seconds_ago()),
            " ago: ", a.last_change()));
      }
    }
    if (const std::string sharing = common::SharingSummary(s);
        !sharing.empty()) {
      lines.push_back(absl::StrCat("  ", sharing));
    }
    // The shard cache of remote datasets: its parts ("; ") fill as many
    // lines as the width needs.
    if (const std::string cache = common::ShardCacheSummary(s);
        !cache.empty()) {
      std::string line;
      const char* indent = "  ";
      for (absl::string_view part : absl::StrSplit(cache, "; ")) {
        if (!line.empty() &&
            static_cast<int>(line.size() + 2 + part.size()) > width) {
          lines.push_back(line);
          line.clear();
          indent = "    ";
        }
        absl::StrAppend(&line, line.empty() ? indent : "; ", part);
      }
      lines.push_back(line);
    }
    if (s.daemon().security().insecure()) {
      lines.push_back(
          "  WARNING: --insecure: plaintext off the loopback; anyone on the "
          "network can read these batches");
    }
    if (s.jobs_size() > 0) {
      lines.push_back(absl::StrFormat("  %-20s %7s %8s %8s %9s %6s %5s %8s",
                                      "JOB", "STREAMS", "IMG/S", "MB/S",
                                      "BATCHES", "SUBST", "WAIT", "DEMAND"));
    }
    for (const auto& job : s.jobs()) {
      // The trainers' reports: their wait share and the images/s they
      // would take; "-" when none reports.
      const batchd::v1::TrainerLoad& trainer = job.trainer();
      const bool reported = trainer.reporting_streams() > 0;
      lines.push_back(absl::StrFormat(
          "  %-20s %7d %8.1f %8.1f %9d %6d %5s %8s",
          job.job().empty() ? "(unnamed)" : job.job(), job.streams(),
          job.images_per_second(), job.bytes_per_second() / 1e6,
          job.batches_sent(), job.substitutions(),
          reported ? absl::StrFormat("%.0f%%", 100 * trainer.wait_ratio())
                   : std::string("-"),
          reported
              ? absl::StrFormat("%.1f", trainer.demand_images_per_second())
              : std::string("-")));
    }
  }
  for (std::string& line : lines) {
    if (static_cast<int>(line.size()) > width) line.resize(width);
  }
  if (static_cast<int>(lines.size()) > height) {
    const size_t hidden = lines.size() - (height - 1);
    lines.resize(height - 1);
    std::string more = absl::StrFormat("... %d more lines (enlarge the "
                                       "terminal)", hidden);
    if (static_cast<int>(more.size()) > width) more.resize(width);
    lines.push_back(more);
  }
  return lines;
}

}  // namespace batchd::client
