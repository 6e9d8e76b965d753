#include "testing/object_servers.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "testing/daemon_process.h"

namespace batchd::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts `argv` with stdout and stderr appended to `log`; the child dies
// with this process.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv,
                            const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return common::ErrnoStatus(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// True once the child has exited (reaped).
bool Exited(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  if (Exited(pid)) return;
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (absl::Now() < deadline) {
    if (Exited(pid)) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// A loopback port free right now (nginx cannot report a port it picked).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string NginxConfig(const std::string& dir, const std::string& root,
                        int port, int https_port) {
  return absl::StrCat(
      "daemon off;\n"
      "master_process off;\n"
      "worker_processes 1;\n"
      "pid ", dir, "/nginx.pid;\n"
      "error_log ", dir, "/error.log warn;\n"
      "events { worker_connections 512; }\n"
      "http {\n"
      "  access_log off;\n"
      "  default_type application/octet-stream;\n"
      "  client_body_temp_path ", dir, "/tmp/body;\n"
      "  proxy_temp_path ", dir, "/tmp/proxy;\n"
      "  fastcgi_temp_path ", dir, "/tmp/fastcgi;\n"
      "  uwsgi_temp_path ", dir, "/tmp/uwsgi;\n"
      "  scgi_temp_path ", dir, "/tmp/scgi;\n"
      "  keepalive_requests 100000;\n"
      "  server {\n"
      "    listen 127.0.0.1:", port, ";\n"
      "    listen 127.0.0.1:", https_port, " ssl;\n"
      "    ssl_certificate ", dir, "/server.pem;\n"
      "    ssl_certificate_key ", dir, "/server.key;\n"
      "    root ", root, ";\n"
      "    etag on;\n"
      "  }\n"
      "}\n");
}

size_t ReadFromView(char* buffer, size_t size, size_t n, void* user) {
  auto* rest = static_cast<absl::string_view*>(user);
  const size_t bytes = std::min(size * n, rest->size());
  std::memcpy(buffer, rest->data(), bytes);
  rest->remove_prefix(bytes);
  return bytes;
}

size_t AppendToString(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

}  // namespace

ObjectServer::~ObjectServer() { Stop(pid_); }

std::string ObjectServer::url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

std::string ObjectServer::https_url() const {
  return https_port_ == 0 ? std::string()
                          : absl::StrCat("https://localhost:", https_port_);
}

std::string ObjectServer::Log() const { return ReadFile(log_path_); }

absl::StatusOr<std::unique_ptr<ObjectServer>> StartNginx(
    const std::string& root_dir) {
  const std::string nginx = "/usr/sbin/nginx";
  if (access(nginx.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        "nginx is not installed (Debian package nginx)");
  }
  const std::string dir = MakeTempDir("nginx");
  mkdir((dir + "/tmp").c_str(), 0700);
  CommandResult certs = RunCommand(
      {"/bin/bash", std::string(BATCHD_SOURCE_DIR) + "/scripts/make_test_certs.sh",
       dir});
  if (certs.exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("make_test_certs.sh failed: ", certs.output));
  }
  std::unique_ptr<ObjectServer> server(new ObjectServer());
  server->ca_file_ = dir + "/ca.pem";
  server->log_path_ = dir + "/error.log";
  // The ports are picked before nginx binds them: another process may take
  // one in between, so a failed start is tried again on others.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = FreePort();
    const int https_port = FreePort();
    if (port == https_port) continue;
    std::ofstream(dir + "/nginx.conf")
        << NginxConfig(dir, root_dir, port, https_port);
    absl::StatusOr<pid_t> pid =
        Spawn({nginx, "-p", dir, "-c", dir + "/nginx.conf", "-e",
               dir + "/error.log"},
              dir + "/stdout.log");
    if (!pid.ok()) return pid.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    bool exited = false;
    while (absl::Now() < deadline) {
      if (Exited(*pid)) {
        exited = true;
        break;
      }
      if (Accepts(port) && Accepts(https_port)) {
        server->pid_ = *pid;
        server->port_ = port;
        server->https_port_ = https_port;
        return server;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (!exited) Stop(*pid);
  }
  return absl::UnavailableError(absl::StrCat(
      "nginx did not start: ", ReadFile(dir + "/error.log"),
      ReadFile(dir + "/stdout.log")));
}

absl::StatusOr<std::unique_ptr<ObjectServer>> StartS3rver(
    const std::string& dir, const std::vector<std::string>& buckets) {
  const std::string node = FindInPath("node");
  if (node.empty()) {
    return absl::FailedPreconditionError(
        "node is not installed (Debian package nodejs)");
  }
  const std::string modules = BATCHD_S3RVER_NODE_MODULES;
  if (access((modules + "/s3rver/package.json").c_str(), R_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        modules, "/s3rver is missing: build the batchd_s3rver_npm target (npm "
                 "ci from testing/s3rver/package-lock.json)"));
  }
  std::unique_ptr<ObjectServer> server(new ObjectServer());
  server->log_path_ = dir + "/s3rver.log";
  // s3_server.js: s3rver with SigV4 signatures checked against its keys
  // (kS3rverAccessKey, kS3rverSecretKey), which s3rver alone does not do.
  std::vector<std::string> argv = {
      node, "--openssl-legacy-provider",
      std::string(BATCHD_SOURCE_DIR) + "/testing/s3rver/s3_server.js",
      "--modules", modules, "--directory", dir + "/data",
      "--access-key", kS3rverAccessKey, "--secret-key", kS3rverSecretKey,
      "--address", "127.0.0.1", "--port", "0",
      "--service-endpoint", "localhost"};
  for (const std::string& bucket : buckets) {
    argv.push_back("--bucket");
    argv.push_back(bucket);
  }
  ASSIGN_OR_RETURN(server->pid_, Spawn(argv, server->log_path_));
  const std::regex listening("listening on [0-9.]+:([0-9]+)");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    std::smatch match;
    const std::string log = server->Log();
    if (std::regex_search(log, match, listening) &&
        absl::SimpleAtoi(match[1].str(), &server->port_) &&
        Accepts(server->port_)) {
      return server;
    }
    if (Exited(server->pid_)) {
      server->pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("s3rver exited at start: ", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::UnavailableError(
      absl::StrCat("s3rver did not listen within 20 s: ", server->Log()));
}

absl::Status S3PutObject(const std::string& endpoint,
                         const std::string& bucket, const std::string& key,
                         absl::string_view bytes,
                         const std::string& access_key,
                         const std::string& secret_key,
                         const std::string& region) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  const std::string url = absl::StrCat(endpoint, "/", bucket, "/", key);
  const std::string sigv4 = absl::StrCat("aws:amz:", region, ":s3");
  const std::string userpwd = absl::StrCat(access_key, ":", secret_key);
  absl::string_view rest = bytes;
  std::string response;
  curl_slist* headers =
      curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  headers = curl_slist_append(headers, "Content-Type: application/x-tar");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                   static_cast<curl_off_t>(bytes.size()));
  curl_easy_setopt(curl, CURLOPT_READFUNCTION, &ReadFromView);
  curl_easy_setopt(curl, CURLOPT_READDATA, &rest);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  const CURLcode code = curl_easy_perform(curl);
  long http = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("PUT ", url, ": ", curl_easy_strerror(code)));
  }
  if (http != 200) {
    return absl::InternalError(
        absl::StrCat("PUT ", url, ": HTTP ", http, ": ", response));
  }
  return absl::OkStatus();
}

}  // namespace batchd::testing
