#include "testing/e2e_helpers.h"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "client/grpc_status.h"
#include "testing/daemon_process.h"

namespace batchd::testing {
namespace {

using batchd::client::Batch;
using batchd::client::FromGrpc;
using batchd::client::Loader;
using batchd::client::LoaderOptions;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

bool SameSubstitution(const batchd::v1::Substitution& a,
                      const batchd::v1::Substitution& b) {
  return a.position() == b.position() &&
         a.original_index() == b.original_index() &&
         a.substitute_index() == b.substitute_index() &&
         a.reason() == b.reason() && a.detail() == b.detail();
}

}  // namespace

uint64_t BatchRecord::PixelHash() const {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : pixels) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

bool operator==(const BatchRecord& a, const BatchRecord& b) {
  if (a.substitutions.size() != b.substitutions.size()) return false;
  for (size_t i = 0; i < a.substitutions.size(); ++i) {
    if (!SameSubstitution(a.substitutions[i], b.substitutions[i])) return false;
  }
  return a.epoch == b.epoch && a.batch_index == b.batch_index &&
         a.sample_indices == b.sample_indices && a.labels == b.labels &&
         a.shape == b.shape && a.layout == b.layout && a.pixels == b.pixels;
}

void PrintTo(const BatchRecord& r, std::ostream* os) {
  *os << absl::StrFormat(
      "{epoch %d batch %d samples [%s] labels [%s] shape [%s] layout %s "
      "%d substitutions, %d pixel bytes, fnv %016x}",
      r.epoch, r.batch_index, absl::StrJoin(r.sample_indices, " "),
      absl::StrJoin(r.labels, " "), absl::StrJoin(r.shape, " "),
      batchd::v1::Layout_Name(r.layout), r.substitutions.size(),
      r.pixels.size(), r.PixelHash());
}

BatchRecord ToRecord(const Batch& batch) {
  BatchRecord r;
  static_cast<client::BatchInfo&>(r) = batch;
  r.shape = batch.shape;
  r.layout = batch.layout;
  r.pixels.assign(reinterpret_cast<const char*>(batch.data()), batch.size());
  return r;
}

absl::StatusOr<std::vector<BatchRecord>> ReadFrom(Loader& loader,
                                                  uint64_t max_batches) {
  std::vector<BatchRecord> records;
  while (records.size() < max_batches) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    if (!batch.ok()) return batch.status();
    records.push_back(ToRecord(*batch));
  }
  return records;
}

absl::StatusOr<std::vector<BatchRecord>> ReadEpochs(
    const std::string& endpoint, const batchd::v1::Plan& plan,
    uint64_t first_epoch, uint64_t epochs, uint64_t first_batch,
    uint32_t prefetch) {
  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan = plan;
  options.prefetch = prefetch;
  if (epochs > 0) options.last_epoch = first_epoch + epochs - 1;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  if (!loader.ok()) return loader.status();
  std::vector<BatchRecord> all;
  for (uint64_t epoch = first_epoch; epoch < first_epoch + epochs; ++epoch) {
    absl::Status started = (*loader)->StartEpoch(epoch, first_batch);
    if (!started.ok()) return started;
    absl::StatusOr<std::vector<BatchRecord>> records = ReadFrom(**loader);
    if (!records.ok()) return records.status();
    for (BatchRecord& r : *records) all.push_back(std::move(r));
  }
  return all;
}

batchd::v1::Plan TrainPlan(const std::string& dataset, uint32_t batch_size,
                           uint32_t size, uint64_t seed) {
  batchd::v1::Plan plan;
  plan.set_dataset(dataset);
  plan.set_batch_size(batch_size);
  plan.set_seed(seed);
  plan.set_shuffle(true);
  plan.mutable_pipeline()->mutable_train()->set_size(size);
  return plan;
}

batchd::v1::Plan EvalPlan(const std::string& dataset, uint32_t batch_size,
                          uint32_t size, uint64_t seed) {
  batchd::v1::Plan plan;
  plan.set_dataset(dataset);
  plan.set_batch_size(batch_size);
  plan.set_seed(seed);
  plan.set_shuffle(false);
  plan.mutable_pipeline()->mutable_eval()->set_size(size);
  return plan;
}

absl::StatusOr<std::string> MakeDataset(int images, int classes, int seed) {
  const std::string dir = MakeTempDir(absl::StrCat("dataset-", images));
  CommandResult made = RunCommand(
      {BuiltBinary("tools/make_dataset"), "--out", dir, "--images",
       std::to_string(images), "--classes", std::to_string(classes), "--seed",
       std::to_string(seed)});
  if (made.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("make_dataset failed (", made.exit_code, "): ",
                     made.output));
  }
  return dir;
}

std::vector<std::string> ImageFolderOrder(const std::string& root) {
  namespace fs = std::filesystem;
  static const char* const kExtensions[] = {
      ".jpg", ".jpeg", ".png", ".gif",  ".bmp", ".ppm",
      ".pgm", ".tif",  ".tiff", ".webp"};
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classes.push_back(entry.path().filename());
  }
  std::sort(classes.begin(), classes.end());
  std::vector<std::string> paths;
  for (const std::string& c : classes) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / c)) {
      const std::string name = entry.path().filename();
      const std::string ext =
          absl::AsciiStrToLower(entry.path().extension().string());
      if (name.empty() || name[0] == '.') continue;
      if (std::find(std::begin(kExtensions), std::end(kExtensions), ext) ==
          std::end(kExtensions)) {
        continue;
      }
      files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      paths.push_back((fs::path(root) / c / f).string());
    }
  }
  return paths;
}

absl::StatusOr<batchd::v1::ServerStatus> GetServerStatus(
    const std::string& endpoint) {
  auto stub =
      batchd::v1::AdminService::NewStub(batchd::client::NewBatchdChannel(endpoint));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  batchd::v1::ServerStatus status;
  grpc::Status rpc = stub->GetStatus(&context, {}, &status);
  if (!rpc.ok()) return FromGrpc(rpc);
  return status;
}

absl::StatusOr<batchd::v1::SetWorkersResponse> SetWorkers(
    const std::string& endpoint, uint32_t workers) {
  auto stub =
      batchd::v1::AdminService::NewStub(batchd::client::NewBatchdChannel(endpoint));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  batchd::v1::SetWorkersRequest request;
  request.set_workers(workers);
  batchd::v1::SetWorkersResponse response;
  grpc::Status rpc = stub->SetWorkers(&context, request, &response);
  if (!rpc.ok()) return FromGrpc(rpc);
  return response;
}

uint64_t ProcStatusBytes(pid_t pid, const char* field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  const std::string prefix = absl::StrCat(field, ":");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    return std::strtoull(line.c_str() + prefix.size(), nullptr, 10) * 1024;
  }
  return 0;
}

int OpenFds(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator it(
      "/proc/" + std::to_string(pid) + "/fd", error);
  if (error) return 0;
  return static_cast<int>(std::distance(it, {}));
}

absl::StatusOr<double> ImagesPerSecond(const std::string& endpoint,
                                       const batchd::v1::Plan& plan,
                                       absl::Duration duration) {
  LoaderOptions options;
  options.endpoint = endpoint;
  options.plan = plan;
  return ImagesPerSecond(std::move(options), duration);
}

absl::StatusOr<double> ImagesPerSecond(LoaderOptions options,
                                       absl::Duration duration) {
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  if (!loader.ok()) return loader.status();
  uint64_t images = 0;
  absl::Time start;
  for (uint64_t epoch = 0;; ++epoch) {
    if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) return s;
    while (true) {
      absl::StatusOr<batchd::client::Batch> batch = (*loader)->Next();
      if (absl::IsOutOfRange(batch.status())) break;
      if (!batch.ok()) return batch.status();
      if (start == absl::Time()) {
        start = absl::Now();  // the first batch paid for the connection
        continue;
      }
      images += batch->sample_indices.size();
      const absl::Duration elapsed = absl::Now() - start;
      if (elapsed >= duration) return images / absl::ToDoubleSeconds(elapsed);
    }
  }
}

const batchd::v1::JobStatus* FindJob(const batchd::v1::ServerStatus& status,
                                     const std::string& job) {
  for (const batchd::v1::JobStatus& j : status.jobs()) {
    if (j.job() == job) return &j;
  }
  return nullptr;
}

std::string ReadPortFile(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(path);
    std::string port;
    if (in >> port) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

absl::StatusOr<Page> ScrapeWithPrometheusParser(const std::string& url) {
  const CommandResult run = RunCommand(
      {"/usr/bin/python3", BATCHD_SOURCE_DIR "/testing/metrics_page.py", url});
  if (run.exit_code != 0) {
    return absl::InternalError("metrics_page.py failed (" +
                               std::to_string(run.exit_code) +
                               "): " + run.output);
  }
  Page page;
  std::istringstream lines(run.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    page[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return page;
}

}  // namespace batchd::testing
