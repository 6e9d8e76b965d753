#include "client/shared_ring.h"

#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace batchd::client {
namespace {

// The daemon's one-line answer, or "" when none came.
std::string ReadAnswerLine(int socket) {
  std::string answer;
  char buffer[512];
  while (answer.find('\n') == std::string::npos && answer.size() < 4096) {
    const ssize_t got = recv(socket, buffer, sizeof(buffer), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    answer.append(buffer, static_cast<size_t>(got));
  }
  return answer.substr(0, answer.find('\n'));
}

// "0 attached" or "<code> <message>".
absl::Status ParseAnswer(absl::string_view line) {
  if (line.empty()) {
    return absl::UnavailableError(
        "the daemon did not answer on the shared-memory side channel");
  }
  const size_t space = line.find(' ');
  int code = 0;
  if (space == absl::string_view::npos ||
      !absl::SimpleAtoi(line.substr(0, space), &code) || code < 0 ||
      code > 16) {
    return absl::UnavailableError(absl::StrCat(
        "the daemon's side channel answered \"", line.substr(0, 200), "\""));
  }
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat("the daemon refused the ring: ",
                                   line.substr(space + 1)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedRing>> AttachSharedRing(
    const batchd::v1::SharedMemoryInvite& invite, uint32_t slots,
    BufferAllocator* allocator, absl::Duration timeout) {
  if (invite.socket().empty() || invite.slot_bytes() == 0 || slots == 0) {
    return absl::InternalError("the daemon's invitation is incomplete");
  }
  auto ring = std::make_shared<SharedRing>();
  ring->slot_bytes = invite.slot_bytes();
  ring->slots = slots;
  absl::StatusOr<common::SharedRegion> region =
      common::SharedRegion::Create(uint64_t{slots} * invite.slot_bytes());
  if (!region.ok()) return region.status();
  ring->region = *std::move(region);
  absl::StatusOr<std::shared_ptr<void>> registration =
      allocator->Register(ring->region.data(), ring->region.size());
  if (!registration.ok()) return registration.status();
  ring->registration = *std::move(registration);

  absl::StatusOr<common::UniqueFd> channel =
      common::ConnectUnix(invite.socket(), timeout);
  if (!channel.ok()) return channel.status();
  const absl::Status sent =
      common::SendDescriptor(channel->get(), ring->region.fd(),
                             absl::StrCat(invite.ticket(), " ", slots));
  // The daemon may refuse before it reads (a uid it does not allow) and
  // close, so the send can fail with a broken pipe while its answer, which
  // says why, is already waiting to be read.
  const std::string answer = ReadAnswerLine(channel->get());
  if (!sent.ok() && answer.empty()) return sent;
  if (absl::Status refused = ParseAnswer(answer); !refused.ok()) {
    return refused;
  }
  return ring;
}

}  // namespace batchd::client
