// AdminServiceImpl: the gRPC adapter for batchd.v1.AdminService: status and
// run-time worker count.
//
// Owns a sampling thread (one sample a second) so that the busy fraction is
// a recent figure that does not depend on how often anyone asks; each
// sample's status also goes into the timeline the live page draws.
//
// Thread-safe. Must outlive the grpc::Server it is registered with.
#ifndef BATCHD_SERVER_SERVICE_ADMIN_SERVICE_H_
#define BATCHD_SERVER_SERVICE_ADMIN_SERVICE_H_

#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "server/control/autoscaler.h"
#include "server/observe/job_stats.h"
#include "server/observe/timeline.h"
#include "server/observe/trainer_reports.h"
#include "server/pipeline/pipeline.h"
#include "server/service/data_service.h"

namespace batchd::server {

// Served raw, so that a request body that does not parse gets a clear
// status (raw_unary.h).
class AdminServiceImpl final
    : public batchd::v1::AdminService::WithRawCallbackMethod_GetStatus<
          batchd::v1::AdminService::WithRawCallbackMethod_SetWorkers<
              batchd::v1::AdminService::Service>> {
 public:
  // Not owned; all must outlive this. `shared_batches` may be null
  // (--share-batches=false).
  AdminServiceImpl(Pipeline* pipeline, DataServiceImpl* data,
                   JobStats* stats, TrainerReports* reports,
                   Autoscaler* autoscaler, SharedBatches* shared_batches,
                   int max_workers);
  ~AdminServiceImpl() override;

  // The status as GetStatus returns it.
  batchd::v1::ServerStatus Status();
  // The last 15 minutes of Status(), one point a second.
  const Timeline& timeline() const { return timeline_; }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetWorkers(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  struct Utilisation {
    absl::Duration busy;
    absl::Duration alive;
  };
  static constexpr int kSamples = 6;  // busy fraction over ~5 seconds
  void SampleLoop();

  Pipeline* const pipeline_;
  DataServiceImpl* const data_;
  JobStats* const stats_;
  TrainerReports* const reports_;
  Autoscaler* const autoscaler_;
  SharedBatches* const shared_batches_;
  const int max_workers_;
  const absl::Time started_;

  absl::Mutex mu_;
  std::deque<Utilisation> samples_ ABSL_GUARDED_BY(mu_);
  Timeline timeline_;
  absl::Notification stop_;
  std::thread sampler_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_ADMIN_SERVICE_H_
