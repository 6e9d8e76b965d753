// The build without the CUDA toolkit: the same API as runtime.h,
// copy_engine.h and NormalizeOnDevice, reporting UNAVAILABLE, so callers
// take the host path at run time with no #ifdefs of their own.
#include <string>
#include <vector>

#include "client/cuda/copy_engine.h"
#include "client/cuda/erase_mix.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"

namespace batchd::cuda {
namespace {

Status NotBuilt() {
  return UnavailableError("no CUDA device: batchd was built without CUDA");
}

}  // namespace

bool BuiltWithCuda() { return false; }
double DeviceInfo::PeakMemoryBandwidth() const { return 0; }
Status ProbeDevice(DeviceInfo*) { return NotBuilt(); }
Status QueryEvent(EventHandle, bool* done) {
  *done = true;
  return NotBuilt();
}
Status SynchronizeEvent(EventHandle) { return NotBuilt(); }
Status StreamWaitEvent(StreamHandle, EventHandle) { return NotBuilt(); }
Status SynchronizeStream(StreamHandle) { return NotBuilt(); }

Status CopyToHost(void*, const void*, size_t) { return NotBuilt(); }

Status PinnedBuffer::Allocate(size_t, std::unique_ptr<PinnedBuffer>*) {
  return NotBuilt();
}
PinnedBuffer::~PinnedBuffer() = default;
Status HostRegistration::Register(void*, size_t,
                                  std::unique_ptr<HostRegistration>*) {
  return NotBuilt();
}
HostRegistration::~HostRegistration() = default;
bool HostRegistration::IsRegistered(const void*) { return false; }
size_t PinnedBuffer::LiveCount() { return 0; }
size_t PinnedBuffer::LiveBytes() { return 0; }

Status NormalizeOnDevice(const uint8_t*, void*, const NormalizeParams&,
                         StreamHandle) {
  return NotBuilt();
}

Status NormalizeEraseMixOnDevice(const uint8_t*, void*,
                                 const NormalizeParams&, const EraseRect*,
                                 const MixParams&, StreamHandle) {
  return NotBuilt();
}

bool NormalizeGroupsOnHostForTest(const uint8_t*, void*,
                                  const NormalizeParams&) {
  return false;
}

class CopyEngine::Impl {};

CopyEngine::CopyEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CopyEngine::~CopyEngine() = default;
Status CopyEngine::Create(const CopyEngineOptions&,
                          std::unique_ptr<CopyEngine>*) {
  return NotBuilt();
}
Status CopyEngine::Submit(const uint8_t*, size_t,
                          const std::vector<NormalizePart>&, CopyTicket*,
                          const EraseMix*) {
  return NotBuilt();
}
Status CopyEngine::Release(int, StreamHandle) { return NotBuilt(); }
StreamHandle CopyEngine::copy_stream() const { return nullptr; }
int CopyEngine::depth() const { return 0; }
int CopyEngine::free_slots() const { return 0; }
uint64_t CopyEngine::waits_on_consumer() const { return 0; }

}  // namespace batchd::cuda
