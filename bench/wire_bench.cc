// batchd-wire-bench: what the wire costs, apart from decoding. A server
// process streams synthetic batches over one StreamBatches stream, one write
// in flight, in chunks of up to kMaxChunkBytes; a client process reads each
// chunk's bytes into the batch's buffer. Two encodings:
// - --path=slices (default; what the daemon and Loader do): chunks are
//   written as slices of the batch buffer (common/chunk_codec.h) from a
//   callback reactor, and read as raw bytes copied once into the buffer;
// - --path=protobuf: the plain generated API, where the `data` bytes field
//   is filled by copying from the batch buffer and parsed into a string
//   before the copy into the buffer.
// Reports bytes per second per stream and CPU seconds per GB on each side
// (getrusage of each whole process, gRPC's threads included).
//
//   batchd-wire-bench --batches=40 --repeats=5            # TCP loopback
//   batchd-wire-bench --path=protobuf                     # the copying path
//   batchd-wire-bench --unix_socket                       # Unix socket
//   batchd-wire-bench --tls_dir=DIR                       # TLS (certificates
//                                       from scripts/make_test_certs.sh DIR)
//   taskset -c 0 batchd-wire-bench                        # both on one core
//
// Prints one line per stream and a median line:
//   stream 0: 1.54 GB in 0.81 s: 1.90 GB/s, server 0.41 CPU-s/GB, client 0.38 CPU-s/GB
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/data.grpc.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/daemon_stream.h"
#include "common/chunk_codec.h"
#include "common/malloc_tuning.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(uint32_t, batches, 40, "batches per stream");
ABSL_FLAG(uint64_t, batch_bytes, uint64_t{64} * 224 * 224 * 3,
          "bytes per batch (default: 64 samples of 224x224x3)");
ABSL_FLAG(uint64_t, chunk_bytes, (uint64_t{4} << 20) - 1024,
          "bytes per BatchChunk (the daemon's kMaxChunkBytes)");
ABSL_FLAG(uint32_t, repeats, 3, "streams, one after another");
ABSL_FLAG(bool, unix_socket, false, "Unix domain socket instead of TCP loopback");
ABSL_FLAG(std::string, tls_dir, "",
          "TCP with TLS, using DIR/server.pem, DIR/server.key and DIR/ca.pem "
          "as scripts/make_test_certs.sh writes them; empty: plaintext");
ABSL_FLAG(int, tls_max_frame_bytes, 0,
          "with --tls_dir: grpc.tsi.max_frame_size on both sides (gRPC caps "
          "TLS frames at 16384); 0: gRPC's default");
ABSL_FLAG(std::string, path, "slices",
          "slices (zero-copy chunks, as the daemon) or protobuf (copying)");

namespace batchd::bench {
namespace {

using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

// Receives one stream as the Loader does (client/daemon_stream.h): chunk
// data is copied once, from gRPC's buffers into `buffer`.
class WireSink : public client::StreamSink {
 public:
  WireSink(uint8_t* buffer, uint64_t batch_bytes)
      : buffer_(buffer), batch_bytes_(batch_bytes) {}

  absl::Status OnResponse(int, StreamResponse&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<uint8_t*> ChunkDestination(
      int, const common::ChunkInfo& info) override {
    if (info.offset + info.length > batch_bytes_) {
      return absl::InternalError("chunk past the batch's end");
    }
    return buffer_ + info.offset;
  }
  absl::Status OnChunk(int, const common::ChunkInfo& info,
                       absl::Duration) override {
    absl::MutexLock lock(&mu_);
    received_ += info.length;
    return absl::OkStatus();
  }
  void OnStreamEnd(int, const grpc::Status& status,
                   const absl::Status& error) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    error_ = error;
    ended_ = true;
  }

  // Blocks until the stream has ended; its final status, the sink's error
  // and the chunk bytes received.
  grpc::Status Wait(absl::Status* error, uint64_t* received) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&ended_));
    *error = error_;
    *received = received_;
    return status_;
  }

 private:
  uint8_t* const buffer_;
  const uint64_t batch_bytes_;
  absl::Mutex mu_;
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

std::string ReadFileOrDie(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    absl::FPrintF(stderr, "error: cannot read %s\n", path);
    std::exit(1);
  }
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Streams `batches` synthetic batches to each client that opens a stream,
// then reports the process's CPU seconds for that stream on `report_fd`.
class WireService final : public batchd::v1::DataService::Service {
 public:
  WireService(uint32_t batches, uint64_t batch_bytes, uint64_t chunk_bytes,
              int report_fd)
      : batches_(batches),
        batch_bytes_(batch_bytes),
        chunk_bytes_(chunk_bytes),
        report_fd_(report_fd),
        pixels_(new uint8_t[batch_bytes]) {
    for (uint64_t i = 0; i < batch_bytes; ++i) {
      pixels_[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    }
  }

  grpc::Status StreamBatches(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<StreamResponse, StreamRequest>* stream)
      override {
    StreamRequest request;
    if (!stream->Read(&request)) return grpc::Status::OK;
    const double cpu_start = CpuSeconds();
    StreamResponse response;  // reused, as the daemon's reactor does
    for (uint32_t b = 0; b < batches_; ++b) {
      response.Clear();
      auto* header = response.mutable_header();
      header->set_epoch(0);
      header->set_batch_index(b);
      header->set_total_bytes(batch_bytes_);
      if (!stream->Write(response)) return grpc::Status::CANCELLED;
      for (uint64_t offset = 0; offset < batch_bytes_;) {
        const uint64_t length = std::min(chunk_bytes_, batch_bytes_ - offset);
        auto* chunk = response.mutable_chunk();
        chunk->set_epoch(0);
        chunk->set_batch_index(b);
        chunk->set_offset(offset);
        chunk->set_data(pixels_.get() + offset, length);
        if (!stream->Write(response)) return grpc::Status::CANCELLED;
        offset += length;
      }
    }
    const double cpu = CpuSeconds() - cpu_start;
    WriteAll(report_fd_, &cpu, sizeof(cpu));
    return grpc::Status::OK;
  }

 private:
  const uint32_t batches_;
  const uint64_t batch_bytes_;
  const uint64_t chunk_bytes_;
  const int report_fd_;
  std::unique_ptr<uint8_t[]> pixels_;
};

// The same stream as WireService, with chunks written as slices of the
// batch buffer from a callback reactor, as the daemon writes them.
class SliceWireService final
    : public batchd::v1::DataService::WithRawCallbackMethod_StreamBatches<
          batchd::v1::DataService::Service> {
 public:
  SliceWireService(uint32_t batches, uint64_t batch_bytes,
                   uint64_t chunk_bytes, int report_fd)
      : batches_(batches),
        batch_bytes_(batch_bytes),
        chunk_bytes_(chunk_bytes),
        report_fd_(report_fd),
        pixels_(new uint8_t[batch_bytes], std::default_delete<uint8_t[]>()) {
    for (uint64_t i = 0; i < batch_bytes; ++i) {
      pixels_.get()[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    }
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* /*context*/) override {
    return new Stream(this);
  }

 private:
  class Stream final
      : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Stream(SliceWireService* service) : service_(service) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok || started_) return;
      started_ = true;
      cpu_start_ = CpuSeconds();
      WriteNext();
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::CANCELLED);
        return;
      }
      WriteNext();
    }
    void OnDone() override { delete this; }

   private:
    void WriteNext() {
      const SliceWireService& s = *service_;
      if (batch_ == s.batches_) {
        const double cpu = CpuSeconds() - cpu_start_;
        WriteAll(s.report_fd_, &cpu, sizeof(cpu));
        Finish(grpc::Status::OK);
        return;
      }
      if (offset_ == 0 && !header_sent_) {
        batchd::v1::StreamResponse header;
        header.mutable_header()->set_batch_index(batch_);
        header.mutable_header()->set_total_bytes(s.batch_bytes_);
        current_ = common::EncodeMessage(header);
        header_sent_ = true;
      } else {
        const uint64_t length = std::min(s.chunk_bytes_, s.batch_bytes_ - offset_);
        current_ = common::EncodeChunk(0, batch_, offset_,
                                       s.pixels_.get() + offset_, length,
                                       s.pixels_);
        offset_ += length;
        if (offset_ == s.batch_bytes_) {
          offset_ = 0;
          header_sent_ = false;
          ++batch_;
        }
      }
      StartWrite(&current_);
    }

    SliceWireService* const service_;
    grpc::ByteBuffer request_;
    grpc::ByteBuffer current_;
    bool started_ = false;
    bool header_sent_ = false;
    uint32_t batch_ = 0;
    uint64_t offset_ = 0;
    double cpu_start_ = 0;
  };

  const uint32_t batches_;
  const uint64_t batch_bytes_;
  const uint64_t chunk_bytes_;
  const int report_fd_;
  std::shared_ptr<uint8_t> pixels_;
};

// The server process: listens, writes its port (or 0 on failure) to
// `port_fd`, serves until killed.
[[noreturn]] void Serve(const std::string& address, int port_fd,
                        int report_fd) {
  WireService copying(absl::GetFlag(FLAGS_batches),
                      absl::GetFlag(FLAGS_batch_bytes),
                      absl::GetFlag(FLAGS_chunk_bytes), report_fd);
  SliceWireService slices(absl::GetFlag(FLAGS_batches),
                          absl::GetFlag(FLAGS_batch_bytes),
                          absl::GetFlag(FLAGS_chunk_bytes), report_fd);
  grpc::ServerBuilder builder;
  int port = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({ReadFileOrDie(dir + "/server.key"),
                                      ReadFileOrDie(dir + "/server.pem")});
    credentials = grpc::SslServerCredentials(ssl);
  }
  if (const int frame = absl::GetFlag(FLAGS_tls_max_frame_bytes); frame > 0) {
    builder.AddChannelArgument(GRPC_ARG_TSI_MAX_FRAME_SIZE, frame);
  }
  builder.AddListeningPort(address, credentials, &port);
  if (absl::GetFlag(FLAGS_path) == "protobuf") {
    builder.RegisterService(&copying);
  } else {
    builder.RegisterService(&slices);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) port = -1;
  if (absl::GetFlag(FLAGS_unix_socket) && server != nullptr) port = 1;
  WriteAll(port_fd, &port, sizeof(port));
  if (server == nullptr) _exit(1);
  server->Wait();
  _exit(0);
}

int Run() {
  const bool use_unix = absl::GetFlag(FLAGS_unix_socket);
  const std::string socket_path =
      absl::StrCat("/tmp/batchd-wire-bench-", getpid(), ".sock");
  const std::string listen =
      use_unix ? absl::StrCat("unix:", socket_path) : "127.0.0.1:0";
  int port_pipe[2], report_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(report_pipe) != 0) {
    std::perror("pipe");
    return 1;
  }
  // Fork before any gRPC call: gRPC does not survive a fork.
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) Serve(listen, port_pipe[1], report_pipe[1]);
  int port = 0;
  if (!ReadAll(port_pipe[0], &port, sizeof(port)) || port <= 0) {
    absl::FPrintF(stderr, "error: the server process did not start\n");
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 1;
  }
  const std::string tls_dir = absl::GetFlag(FLAGS_tls_dir);
  // The test certificate names localhost.
  const std::string target =
      use_unix ? listen
               : absl::StrCat(tls_dir.empty() ? "127.0.0.1:" : "localhost:",
                              port);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);  // the client's limit
  if (const int frame = absl::GetFlag(FLAGS_tls_max_frame_bytes); frame > 0) {
    args.SetInt(GRPC_ARG_TSI_MAX_FRAME_SIZE, frame);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!tls_dir.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFileOrDie(tls_dir + "/ca.pem");
    credentials = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(target, credentials, args);
  auto stub = batchd::v1::DataService::NewStub(channel);

  const bool slices = absl::GetFlag(FLAGS_path) != "protobuf";
  const uint64_t batch_bytes = absl::GetFlag(FLAGS_batch_bytes);
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[batch_bytes]);
  std::vector<double> rates, server_cpu_per_gb, client_cpu_per_gb;
  int rc = 0;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    grpc::ClientContext context;
    StreamRequest open;
    open.mutable_open()->mutable_plan()->set_dataset("wire");
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    uint64_t received = 0;
    grpc::Status status;
    if (!slices) {
      auto stream = stub->StreamBatches(&context);
      stream->Write(open);
      StreamResponse response;
      while (stream->Read(&response)) {
        if (response.has_chunk()) {
          const auto& chunk = response.chunk();
          if (chunk.offset() + chunk.data().size() > batch_bytes) {
            absl::FPrintF(stderr, "error: chunk past the batch's end\n");
            rc = 1;
            break;
          }
          std::memcpy(buffer.get() + chunk.offset(), chunk.data().data(),
                      chunk.data().size());
          received += chunk.data().size();
        }
      }
      stream->WritesDone();
      status = stream->Finish();
    } else {
      // As the Loader reads: its DaemonStream, chunk data copied once into
      // place.
      WireSink sink(buffer.get(), batch_bytes);
      absl::Status error;
      {
        client::DaemonStream stream(/*daemon=*/0, channel, open, &sink);
        status = sink.Wait(&error, &received);
      }
      if (!error.ok()) {
        absl::FPrintF(stderr, "error: %s\n", error.ToString());
        rc = 1;
        break;
      }
    }
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    const double client_cpu = CpuSeconds() - cpu_start;
    double server_cpu = 0;
    if (!status.ok() || !ReadAll(report_pipe[0], &server_cpu, sizeof(double))) {
      absl::FPrintF(stderr, "error: stream failed: %s\n",
                    status.error_message());
      rc = 1;
      break;
    }
    const double gb = received / 1e9;
    rates.push_back(gb / seconds);
    server_cpu_per_gb.push_back(server_cpu / gb);
    client_cpu_per_gb.push_back(client_cpu / gb);
    absl::PrintF("stream %d: %.2f GB in %.2f s: %.2f GB/s, server %.3f "
                 "CPU-s/GB, client %.3f CPU-s/GB\n",
                 r, gb, seconds, rates.back(), server_cpu_per_gb.back(),
                 client_cpu_per_gb.back());
    std::fflush(stdout);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (use_unix) unlink(socket_path.c_str());
  if (rc != 0 || rates.empty()) return rc == 0 ? 1 : rc;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  absl::PrintF("median over %d streams (%s, %s): %.2f GB/s, server %.3f CPU-s/GB, "
               "client %.3f CPU-s/GB\n",
               rates.size(),
               use_unix ? "unix socket"
                        : (tls_dir.empty() ? "tcp loopback" : "tls loopback"),
               slices ? "slices" : "protobuf",
               median(rates), median(server_cpu_per_gb),
               median(client_cpu_per_gb));
  return 0;
}

}  // namespace
}  // namespace batchd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the daemon and the Loader do (before the fork, so both sides get it).
  batchd::common::TuneMallocForLargeBuffers();
  return batchd::bench::Run();
}
