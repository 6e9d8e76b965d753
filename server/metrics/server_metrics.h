// ServerMetrics: the daemon's Prometheus metrics (names, units, labels) and
// the handles the hot paths update. docs/observability.md lists every metric.
//
// Owns the MetricsRegistry. The pipeline and the data service hold a
// pointer (nullable: without one they record nothing) and update the
// handles below with relaxed atomics; values that other objects already
// keep (workers, queues, per-job totals) are read at scrape time by the
// collector that BatchdServer adds.
//
// Thread-safe.
#ifndef BATCHD_SERVER_METRICS_SERVER_METRICS_H_
#define BATCHD_SERVER_METRICS_SERVER_METRICS_H_

#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "server/metrics/metrics.h"

namespace batchd::server {

class ServerMetrics {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  MetricsRegistry& registry() { return registry_; }

  // batchd_stage_seconds{stage}: per sample for read, decode, transform and
  // augment (the plan's augmentation ops, for plans that have some);
  // per batch for assemble (request accepted to last sample written, queue
  // waits included) and send (last sample written to last chunk handed to
  // gRPC).
  Histogram& read_seconds() { return read_; }
  Histogram& decode_seconds() { return decode_; }
  Histogram& transform_seconds() { return transform_; }
  Histogram& augment_seconds() { return augment_; }
  Histogram& assemble_seconds() { return assemble_; }
  Histogram& send_seconds() { return send_; }

  // batchd_object_store_request_seconds: each range request to the object
  // store (remote TAR_SHARDS), retries included; batchd_shard_download_seconds:
  // each whole-shard download into the shard cache.
  Histogram& object_store_request_seconds() { return store_request_; }
  Histogram& shard_download_seconds() { return shard_download_; }

  // batchd_timeline_render_seconds: the CPU time of each render of the
  // live page's timeline (observe/timeline_snapshot.h), at most one a
  // second however many poll it.
  Histogram& timeline_render_seconds() { return timeline_render_; }

  // batchd_batches_outstanding: batches accepted and not yet fully sent.
  Gauge& batches_outstanding() { return outstanding_; }

  // batchd_shared_memory_bytes: client memory mapped for same-host shared
  // memory, over all streams (counted in the buffer budget).
  Gauge& shared_memory_bytes() { return shared_memory_bytes_; }
  // batchd_shared_memory_attach_total{result}: side-channel handshakes,
  // "attached" or the refusal's gRPC code name.
  void SharedMemoryAttach(const char* result);
  // batchd_tls_handshake_failures_total (service/grpc_log_filter.h).
  Counter& tls_handshake_failures() { return tls_handshake_failures_; }

  // batchd_job_max_streams and batchd_job_max_buffer_bytes: the per-job
  // limits of `info` (--max-streams-per-job, --max-job-buffer-share of
  // --max-buffer-bytes), for dashboards that draw a job against them.
  void SetJobLimits(const batchd::v1::DaemonInfo& info);

  // batchd_substitutions_total{reason}.
  void SampleSubstituted(batchd::v1::SubstitutionReason reason);
  // batchd_damaged_samples_decoded_total{reason}: with --corrupt-policy
  // decode, damaged samples delivered as libjpeg decoded them.
  void SampleDecodedDamaged(batchd::v1::SubstitutionReason reason);
  // batchd_content_mismatches_total{named,content}: samples read whose
  // content (image_format.h's names) is not what their file or member
  // name's extension says, e.g. named="jpeg", content="png" (decoded all
  // the same) or content="html" (substituted, HTML_PAGE). Both labels come
  // from a fixed list of nine names, so the series stay bounded.
  void ContentMismatch(const char* named, const char* content);
  // batchd_rejected_requests_total{code}: batch requests refused with a
  // RequestRejected, and streams ended because a request was invalid.
  void RequestRejected(int grpc_code);

  // batchd_bound_hits_total{bound}: a resource bound of the resource model
  // (RELIABILITY.md) was reached: "stream_reads_paused",
  // "planless_stream_timeout", "planless_streams_per_connection",
  // "streams_per_identity", "open_streams", "fair_share" (the admission
  // rules, server/stream/admission_table.h), "auth_failure_logs_suppressed",
  // ...
  void BoundHit(const char* bound);

  // Writes the families read from an admin status (workers, queues, busy
  // fraction, per-job figures) and process memory.
  static void WriteStatus(const batchd::v1::ServerStatus& status,
                          uint64_t read_queue, MetricWriter& writer);

 private:
  MetricsRegistry registry_;
  Family<Counter>& substitutions_;
  Family<Counter>& damaged_;
  Family<Counter>& content_mismatches_;
  Family<Counter>& rejected_;
  Family<Histogram>& stages_;
  Histogram& read_;
  Histogram& decode_;
  Histogram& transform_;
  Histogram& augment_;
  Histogram& assemble_;
  Histogram& send_;
  Histogram& store_request_;
  Histogram& shard_download_;
  Histogram& timeline_render_;
  Gauge& outstanding_;
  Gauge& shared_memory_bytes_;
  Family<Counter>& shared_memory_attach_;
  Family<Counter>& bound_hits_;
  Counter& tls_handshake_failures_;
};

// The name of a gRPC status code as gRPC spells it (INVALID_ARGUMENT);
// UNKNOWN for a number out of range.
const char* GrpcCodeName(int code);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_METRICS_SERVER_METRICS_H_
