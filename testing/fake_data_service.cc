#include "testing/fake_data_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace batchd::client::testing {

using ::batchd::v1::BatchHeader;
using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

uint8_t FakePixel(uint64_t epoch, uint64_t index, uint64_t offset) {
  uint64_t x = epoch * 0x9E3779B97F4A7C15ull + index * 0xBF58476D1CE4E5B9ull +
               offset * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint8_t>(x ^ (x >> 17) ^ offset);
}

uint64_t FakeSampleIndex(uint64_t epoch, uint64_t index, uint64_t position,
                         uint32_t batch_size) {
  return epoch * 100000 + index * batch_size + position;
}

bool FakeStream::ReadRequest() {
  StreamRequest request;
  if (!stream_->Read(&request)) return false;
  if (request.has_report()) {
    absl::MutexLock lock(&service_->mu_);
    service_->reports_.push_back(request.report());
    return true;
  }
  if (!request.has_request()) return true;  // a stray `open`: ignored here
  const uint64_t epoch = request.request().epoch();
  for (uint64_t index : request.request().batch_indices()) {
    const Key key{epoch, index};
    {
      absl::MutexLock lock(&service_->mu_);
      service_->requested_.push_back(key);
    }
    if (index >= batches_per_epoch()) {
      StreamResponse response;
      response.mutable_rejected()->set_epoch(epoch);
      response.mutable_rejected()->set_batch_index(index);
      response.mutable_rejected()->set_code(grpc::StatusCode::INVALID_ARGUMENT);
      response.mutable_rejected()->set_message("batch index beyond the epoch");
      stream_->Write(response);
      continue;
    }
    if (outstanding_ + 1 > window_) {
      {
        absl::MutexLock lock(&service_->mu_);
        ++service_->window_violations_;
      }
      StreamResponse response;
      response.mutable_rejected()->set_epoch(epoch);
      response.mutable_rejected()->set_batch_index(index);
      response.mutable_rejected()->set_code(
          grpc::StatusCode::RESOURCE_EXHAUSTED);
      response.mutable_rejected()->set_message("more than the window");
      stream_->Write(response);
      continue;
    }
    ++outstanding_;
    pending_.push_back(key);
    absl::MutexLock lock(&service_->mu_);
    service_->max_outstanding_ =
        std::max(service_->max_outstanding_, outstanding_);
  }
  return true;
}

uint64_t FakeStream::batches_per_epoch() const {
  return service_->options().batches_per_epoch;
}

BatchHeader FakeStream::Header(const Key& key) const {
  const FakeDataService::Options& options = service_->options();
  uint32_t samples = options.batch_size;
  if (key.second + 1 == options.batches_per_epoch &&
      options.last_batch_size != 0) {
    samples = options.last_batch_size;
  }
  BatchHeader header;
  header.set_epoch(key.first);
  header.set_batch_index(key.second);
  for (uint32_t i = 0; i < samples; ++i) {
    const uint64_t sample =
        FakeSampleIndex(key.first, key.second, i, options.batch_size);
    header.add_sample_indices(sample);
    header.add_labels(static_cast<int32_t>(sample % 7));
  }
  if (options.view_sides.empty()) {
    header.add_shape(samples);
    header.add_shape(options.height);
    header.add_shape(options.width);
    header.add_shape(3);
  } else {
    header.add_shape(service_->BatchBytes(key.second));
    uint64_t offset = 0;
    for (uint32_t side : options.view_sides) {
      batchd::v1::ViewShape* view = header.add_views();
      for (uint64_t dim : {uint64_t{samples}, uint64_t{side}, uint64_t{side},
                           uint64_t{3}}) {
        view->add_shape(dim);
      }
      view->set_offset(offset);
      offset += uint64_t{samples} * side * side * 3;
    }
  }
  header.set_dtype(batchd::v1::DTYPE_UINT8);
  header.set_layout(batchd::v1::LAYOUT_NHWC);
  header.set_total_bytes(service_->BatchBytes(key.second));
  if (key.second == 1) {
    batchd::v1::Substitution* substitution = header.add_substitutions();
    substitution->set_position(0);
    substitution->set_original_index(header.sample_indices(0));
    substitution->set_substitute_index(header.sample_indices(0) + 1);
    substitution->set_reason(batchd::v1::TRUNCATED);
    substitution->set_detail("fake truncation");
  }
  return header;
}

void FakeStream::Answered(const Key& key) {
  auto it = std::find(pending_.begin(), pending_.end(), key);
  if (it != pending_.end()) {
    pending_.erase(it);
    --outstanding_;
  }
}

bool FakeStream::SendBatch(const Key& key) {
  StreamResponse response;
  *response.mutable_header() = Header(key);
  const uint64_t total = response.header().total_bytes();
  if (!stream_->Write(response)) return false;
  const uint64_t chunk_bytes = service_->options().chunk_bytes;
  std::string data;
  for (uint64_t offset = 0; offset < total; offset += chunk_bytes) {
    const uint64_t n = std::min(chunk_bytes, total - offset);
    data.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      data[i] = static_cast<char>(FakePixel(key.first, key.second, offset + i));
    }
    StreamResponse chunk;
    chunk.mutable_chunk()->set_epoch(key.first);
    chunk.mutable_chunk()->set_batch_index(key.second);
    chunk.mutable_chunk()->set_offset(offset);
    chunk.mutable_chunk()->set_data(data);
    // The batch stops being outstanding with its last chunk; count that
    // before the client can see the chunk and send a new request.
    if (offset + n == total) Answered(key);
    if (!stream_->Write(chunk)) return false;
  }
  if (total == 0) Answered(key);
  absl::MutexLock lock(&service_->mu_);
  ++service_->sent_total_;
  return true;
}

bool FakeStream::ReadBatchRequest() {
  while (pending_.empty()) {
    if (!ReadRequest()) return false;
  }
  return true;
}

bool FakeStream::Reject(const Key& key, int code, const std::string& message) {
  StreamResponse response;
  response.mutable_rejected()->set_epoch(key.first);
  response.mutable_rejected()->set_batch_index(key.second);
  response.mutable_rejected()->set_code(code);
  response.mutable_rejected()->set_message(message);
  Answered(key);
  return stream_->Write(response);
}

bool FakeStream::SendRaw(const StreamResponse& response) {
  return stream_->Write(response);
}

FakeDataService::Script FakeDataService::ServeInOrder() {
  return [](FakeStream& stream) {
    while (stream.ReadRequest()) {
      while (!stream.pending().empty()) {
        if (!stream.SendBatch(stream.pending().front())) return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  };
}

FakeDataService::Script FakeDataService::ServeReversedGroups(size_t group) {
  return [group](FakeStream& stream) {
    while (stream.ReadRequest()) {
      bool has_last = false;
      for (const FakeStream::Key& key : stream.pending()) {
        if (key.second + 1 == stream.batches_per_epoch()) has_last = true;
      }
      if (stream.pending().size() < group && !has_last) continue;
      std::vector<FakeStream::Key> keys(stream.pending().rbegin(),
                                        stream.pending().rend());
      for (const FakeStream::Key& key : keys) {
        if (!stream.SendBatch(key)) return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  };
}

uint64_t FakeDataService::BatchBytes(uint64_t index) const {
  uint64_t samples = options_.batch_size;
  if (index + 1 == options_.batches_per_epoch && options_.last_batch_size != 0) {
    samples = options_.last_batch_size;
  }
  return samples * SampleBytes();
}

uint64_t FakeDataService::SampleBytes() const {
  if (options_.view_sides.empty()) {
    return uint64_t{options_.height} * options_.width * 3;
  }
  uint64_t bytes = 0;
  for (uint32_t side : options_.view_sides) bytes += uint64_t{side} * side * 3;
  return bytes;
}

grpc::Status FakeDataService::ListDatasets(
    grpc::ServerContext*, const batchd::v1::ListDatasetsRequest*,
    batchd::v1::ListDatasetsResponse* response) {
  batchd::v1::DatasetInfo* info = response->add_datasets();
  info->set_name("fake");
  info->set_num_samples(options_.batches_per_epoch * options_.batch_size);
  return grpc::Status::OK;
}

grpc::Status FakeDataService::StreamBatches(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<StreamResponse, StreamRequest>* stream) {
  StreamRequest first;
  if (!stream->Read(&first)) return grpc::Status::OK;
  if (!first.has_open()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the first message must be `open`");
  }
  if (first.open().plan().dataset() == "bad") {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "plan.dataset: unknown dataset \"bad\"; see "
                        "ListDatasets");
  }
  uint32_t window = options_.window;
  if (first.open().window() > 0) window = std::min(window, first.open().window());
  {
    absl::MutexLock lock(&mu_);
    if (options_.refuse_first < 0 || streams_refused_ < options_.refuse_first) {
      ++streams_refused_;
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          options_.refusal);
    }
    ++streams_opened_;
  }
  StreamResponse opened;
  opened.mutable_opened()->set_window(window);
  opened.mutable_opened()->set_batches_per_epoch(options_.batches_per_epoch);
  opened.mutable_opened()->set_samples_per_epoch(options_.batches_per_epoch *
                                                 options_.batch_size);
  const uint64_t max_batch_bytes = options_.batch_size * SampleBytes();
  if (options_.view_sides.empty()) {
    opened.mutable_opened()->add_shape(options_.batch_size);
    opened.mutable_opened()->add_shape(options_.height);
    opened.mutable_opened()->add_shape(options_.width);
    opened.mutable_opened()->add_shape(3);
  } else {
    opened.mutable_opened()->add_shape(max_batch_bytes);
  }
  opened.mutable_opened()->set_max_batch_bytes(max_batch_bytes);
  opened.mutable_opened()->set_dtype(batchd::v1::DTYPE_UINT8);
  opened.mutable_opened()->set_layout(batchd::v1::LAYOUT_NHWC);
  if (!stream->Write(opened)) return grpc::Status::OK;
  FakeStream fake(this, context, stream, window);
  return script_(fake);
}

uint64_t FakeDataService::max_outstanding() const {
  absl::MutexLock lock(&mu_);
  return max_outstanding_;
}

void FakeDataService::ResetMaxOutstanding() {
  absl::MutexLock lock(&mu_);
  max_outstanding_ = 0;
}

uint64_t FakeDataService::window_violations() const {
  absl::MutexLock lock(&mu_);
  return window_violations_;
}

uint64_t FakeDataService::requested_total() const {
  absl::MutexLock lock(&mu_);
  return requested_.size();
}

uint64_t FakeDataService::sent_total() const {
  absl::MutexLock lock(&mu_);
  return sent_total_;
}

std::vector<FakeStream::Key> FakeDataService::requested() const {
  absl::MutexLock lock(&mu_);
  return requested_;
}

std::vector<batchd::v1::TrainerReport> FakeDataService::reports() const {
  absl::MutexLock lock(&mu_);
  return reports_;
}

int FakeDataService::streams_refused() const {
  absl::MutexLock lock(&mu_);
  return streams_refused_;
}

int FakeDataService::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

bool FakeDataService::WaitForRequested(uint64_t n) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return requested_.size() >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(20));
}

FakeServer::FakeServer(FakeDataService::Options options,
                       FakeDataService::Script script)
    : service_(options, std::move(script)) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("localhost:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  endpoint_ = absl::StrCat("localhost:", port);
}

FakeServer::~FakeServer() { Shutdown(); }

void FakeServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // Cancels streams still open at once.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

}  // namespace batchd::client::testing
