#include "client/loader_stats.h"

namespace batchd::client {

namespace {
double Share(absl::Duration part, absl::Duration wall) {
  return wall <= absl::ZeroDuration() ? 0.0 : absl::FDivDuration(part, wall);
}
double Rate(double count, absl::Duration wall) {
  return wall <= absl::ZeroDuration() ? 0.0
                                      : count / absl::ToDoubleSeconds(wall);
}
}  // namespace

LoaderStats LoaderStats::Since(const LoaderStats& earlier) const {
  LoaderStats d = *this;
  d.batches -= earlier.batches;
  d.images -= earlier.images;
  d.bytes -= earlier.bytes;
  d.waited -= earlier.waited;
  d.startup_waited -= earlier.startup_waited;
  d.compute -= earlier.compute;
  d.copy -= earlier.copy;
  d.received_bytes -= earlier.received_bytes;
  d.wall -= earlier.wall;
  d.rerequested -= earlier.rerequested;
  d.hedged -= earlier.hedged;
  d.progress_cancels -= earlier.progress_cancels;
  d.reports_sent -= earlier.reports_sent;
  d.reports_rejected -= earlier.reports_rejected;
  d.prefetch_grows -= earlier.prefetch_grows;
  return d;
}

double LoaderStats::waited_fraction() const { return Share(waited, wall); }
double LoaderStats::steady_waited_fraction() const {
  return Share(waited - startup_waited, wall - startup_waited);
}
double LoaderStats::compute_fraction() const { return Share(compute, wall); }
double LoaderStats::copy_fraction() const { return Share(copy, wall); }
double LoaderStats::batches_per_second() const {
  return Rate(static_cast<double>(batches), wall);
}
double LoaderStats::images_per_second() const {
  return Rate(static_cast<double>(images), wall);
}
double LoaderStats::bytes_per_second() const {
  return Rate(static_cast<double>(bytes), wall);
}
double LoaderStats::received_bytes_per_second() const {
  return Rate(static_cast<double>(received_bytes), wall);
}

}  // namespace batchd::client
