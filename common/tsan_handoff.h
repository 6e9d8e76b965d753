// Happens-before edges that ThreadSanitizer cannot see for itself: handoffs
// of an object through a library that is not built with TSan (Debian's
// gRPC orders a reactor's construction, its Start* calls and its reactions
// with synchronisation of its own). HandOff before giving the object to
// the library, TakeBack when the library gives it back; with the same
// address, TSan then orders the two. No-ops unless built with
// -fsanitize=thread (`make test-tsan`).
#ifndef BATCHD_COMMON_TSAN_HANDOFF_H_
#define BATCHD_COMMON_TSAN_HANDOFF_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BATCHD_TSAN_HANDOFF 1
#endif
#endif

#ifdef BATCHD_TSAN_HANDOFF
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace batchd::common {

inline void TsanHandOff(const void* object) {
#ifdef BATCHD_TSAN_HANDOFF
  __tsan_release(const_cast<void*>(object));
#else
  (void)object;
#endif
}

inline void TsanTakeBack(const void* object) {
#ifdef BATCHD_TSAN_HANDOFF
  __tsan_acquire(const_cast<void*>(object));
#else
  (void)object;
#endif
}

}  // namespace batchd::common

#endif  // BATCHD_COMMON_TSAN_HANDOFF_H_
