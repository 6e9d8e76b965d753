#include "python/native/native_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "batchd/v1/data.grpc.pb.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"

namespace batchd::python {

NativeBatch::NativeBatch(client::Batch batch,
                         std::shared_ptr<std::atomic<int64_t>> live)
    : batch_(std::move(batch)), live_(std::move(live)) {
  live_->fetch_add(1);
}

NativeBatch::~NativeBatch() { Release(); }

void NativeBatch::Release() {
  if (batch_.data() == nullptr) return;
  batch_.Release();
  live_->fetch_sub(1);
}

absl::StatusOr<std::unique_ptr<NativeLoader>> NativeLoader::Create(
    NativeLoaderOptions options) {
  client::LoaderOptions loader_options;
  loader_options.endpoint = std::move(options.endpoint);
  loader_options.plan = std::move(options.plan);
  loader_options.prefetch = options.prefetch;
  loader_options.connect_timeout = options.connect_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<client::Loader> loader,
                   client::Loader::Create(std::move(loader_options)));
  return std::unique_ptr<NativeLoader>(new NativeLoader(std::move(loader)));
}

NativeLoader::NativeLoader(std::unique_ptr<client::Loader> loader)
    : opened_(loader->opened()),
      window_(loader->window()),
      loader_(std::move(loader)),
      result_(absl::UnknownError("no batch fetched")) {
  fetcher_ = std::thread([this] { FetchLoop(); });
}

NativeLoader::~NativeLoader() { Close(); }

bool NativeLoader::closed() const {
  absl::MutexLock lock(&mu_);
  return closing_;
}

void NativeLoader::FetchLoop() {
  for (;;) {
    client::Loader* loader = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || (requested_ && !done_);
      };
      mu_.Await(absl::Condition(&has_work));
      if (closing_) {
        if (requested_ && !done_) {
          result_ = absl::CancelledError("the loader is closed");
          done_ = true;
        }
        return;
      }
      loader = loader_.get();
    }
    // Close() destroys the loader only after this call returns, or, for a
    // daemon that stopped answering, after kCloseGrace, which wakes it.
    absl::StatusOr<client::Batch> batch = loader->Next();
    absl::MutexLock lock(&mu_);
    result_ = std::move(batch);
    done_ = true;
  }
}

absl::Status NativeLoader::AwaitFetch(
    const std::function<void(std::function<void()>)>& without_gil,
    const InterruptCheck& check) {
  for (;;) {
    bool done = false;
    without_gil([this, &done] {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&done_), kWaitSlice);
      done = done_;
    });
    if (done) return absl::OkStatus();
    RETURN_IF_ERROR(check());
  }
}

absl::Status NativeLoader::StartEpoch(
    uint64_t epoch, uint64_t first_batch,
    const std::function<void(std::function<void()>)>& without_gil,
    const InterruptCheck& check) {
  bool in_flight = false;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the loader is closed");
    in_flight = requested_;
  }
  if (in_flight) {
    // An interrupted Next() left a fetch running; the new range replaces it.
    RETURN_IF_ERROR(AwaitFetch(without_gil, check));
    absl::StatusOr<client::Batch> dropped(absl::UnknownError(""));
    {
      absl::MutexLock lock(&mu_);
      dropped = std::move(result_);
      requested_ = false;
      done_ = false;
    }
    without_gil([&dropped] { dropped = absl::UnknownError(""); });
  }
  absl::Status status;
  without_gil([this, epoch, first_batch, &status] {
    client::Loader* loader;
    {
      absl::MutexLock lock(&mu_);
      loader = loader_.get();
    }
    status = loader == nullptr
                 ? absl::FailedPreconditionError("the loader is closed")
                 : loader->StartEpoch(epoch, first_batch);
  });
  return status;
}

absl::StatusOr<std::unique_ptr<NativeBatch>> NativeLoader::Next(
    const std::function<void(std::function<void()>)>& without_gil,
    const InterruptCheck& check) {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the loader is closed");
    if (!requested_) {
      requested_ = true;
      done_ = false;
    }
  }
  RETURN_IF_ERROR(AwaitFetch(without_gil, check));
  absl::StatusOr<client::Batch> result(absl::UnknownError(""));
  {
    absl::MutexLock lock(&mu_);
    result = std::move(result_);
    result_ = absl::UnknownError("no batch fetched");
    requested_ = false;
    done_ = false;
  }
  if (absl::IsOutOfRange(result.status())) return nullptr;
  if (!result.ok()) return result.status();
  return std::make_unique<NativeBatch>(*std::move(result), live_);
}

client::Loader::Stats NativeLoader::Stats() const {
  absl::MutexLock lock(&mu_);
  if (loader_ == nullptr) return client::Loader::Stats();
  return loader_->stats();
}

void NativeLoader::Close() {
  bool in_flight = false;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    in_flight = requested_ && !done_;
    if (in_flight) {
      // Usually the batch is on its way; give it a moment.
      mu_.AwaitWithTimeout(absl::Condition(&done_), kCloseGrace);
    }
  }
  // ~Loader half-closes or cancels the stream and joins its reader; a Next()
  // still blocked in the fetch thread wakes with CANCELLED.
  std::unique_ptr<client::Loader> loader;
  {
    absl::MutexLock lock(&mu_);
    loader = std::move(loader_);
  }
  loader.reset();
  if (fetcher_.joinable()) fetcher_.join();
  absl::StatusOr<client::Batch> dropped(absl::UnknownError(""));
  {
    absl::MutexLock lock(&mu_);
    dropped = std::move(result_);
    result_ = absl::CancelledError("the loader is closed");
    requested_ = false;
    done_ = false;
  }
}

absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::string& endpoint, absl::Duration timeout) {
  auto stub =
      batchd::v1::DataService::NewStub(client::NewBatchdChannel(endpoint));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  batchd::v1::ListDatasetsResponse response;
  grpc::Status status = stub->ListDatasets(
      &context, batchd::v1::ListDatasetsRequest(), &response);
  if (!status.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("ListDatasets at ", endpoint, ": ",
                     status.error_message()));
  }
  return response;
}

}  // namespace batchd::python
