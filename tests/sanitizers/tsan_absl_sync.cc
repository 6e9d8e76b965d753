// Makes Debian's Abseil synchronisation visible to ThreadSanitizer.
//
// Abseil annotates its Mutex, CondVar and Notification for TSan only when
// Abseil itself is built with -fsanitize=thread; Debian's shared libraries
// are not, so TSan sees none of the happens-before edges they create and
// reports every access they order as a race. Every binary of a TSan build
// (BATCHD_SANITIZE=thread, `make test-tsan`) links this file, and the link
// reroutes each call to these functions (ld --wrap, for every WRAP line
// below; CMakeLists.txt reads them from here) through a wrapper that tells
// TSan what the call means:
// acquiring a mutex acquires its address, releasing releases it; a
// condition wait releases before and acquires after; Notify releases, a
// wait that saw the notification acquires.
//
// Lock-order (deadlock) checking and reader/writer distinctions are not
// modelled: a reader's unlock is treated like a writer's, which can only
// hide a race between two readers, never invent one.
#include <atomic>
#include <cstddef>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }

// Notification::HasBeenNotified() is inline: it loads notified_yet_, the
// member after the Mutex, with acquire order, in instrumented code. Notify
// releases that address too, so a load that sees true is ordered after it.
static_assert(sizeof(absl::Notification) ==
                  sizeof(absl::Mutex) + alignof(absl::Mutex),
              "absl::Notification's layout changed: update NotifiedFlag");
const void* NotifiedFlag(const absl::Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

// A Condition is evaluated inside Abseil with the mutex held, by the
// waiter or by the thread that unlocks, before the call returns, and a
// false one sends the waiter back to sleep, unlocking inside Abseil: each
// wrapped condition acquires the mutex before it reads and releases it
// after.
struct GuardedCondition {
  const absl::Condition* condition;
  const absl::Mutex* mu;
};
bool EvalGuarded(void* arg) {
  const auto* guarded = static_cast<const GuardedCondition*>(arg);
  Acquire(guarded->mu);
  const bool holds = guarded->condition->Eval();
  Release(guarded->mu);
  return holds;
}
#define GUARDED(c, m)                  \
  GuardedCondition guarded{&(c), (m)}; \
  const absl::Condition guarded_condition(&EvalGuarded, &guarded)

}  // namespace

using absl::Barrier;
using absl::BlockingCounter;
using absl::CondVar;
using absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// WRAP(symbol, return type, (parameters)): declares __real_symbol and
// defines __wrap_symbol, whose body calls REAL(args).
#define WRAP(sym, ret, params)        \
  ret __real_##sym params;            \
  ret __wrap_##sym params

extern "C" {

// Mutex: exclusive and shared locking.
WRAP(_ZN4absl7debian35Mutex4LockEv, void, (Mutex * m)) {
  __real__ZN4absl7debian35Mutex4LockEv(m);
  Acquire(m);
}
WRAP(_ZN4absl7debian35Mutex10ReaderLockEv, void, (Mutex * m)) {
  __real__ZN4absl7debian35Mutex10ReaderLockEv(m);
  Acquire(m);
}
WRAP(_ZN4absl7debian35Mutex7TryLockEv, bool, (Mutex * m)) {
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(m);
  if (locked) Acquire(m);
  return locked;
}
WRAP(_ZN4absl7debian35Mutex13ReaderTryLockEv, bool, (Mutex * m)) {
  const bool locked = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(m);
  if (locked) Acquire(m);
  return locked;
}
WRAP(_ZN4absl7debian35Mutex6UnlockEv, void, (Mutex * m)) {
  Release(m);
  __real__ZN4absl7debian35Mutex6UnlockEv(m);
}
WRAP(_ZN4absl7debian35Mutex12ReaderUnlockEv, void, (Mutex * m)) {
  Release(m);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(m);
}

// Mutex: conditional locking. Each returns holding the lock.
WRAP(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, void,
     (Mutex * m, const Condition& c)) {
  GUARDED(c, m);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(m, guarded_condition);
  Acquire(m);
}
WRAP(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE, void,
     (Mutex * m, const Condition& c)) {
  GUARDED(c, m);
  __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(m, guarded_condition);
  Acquire(m);
}
WRAP(_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
     bool, (Mutex * m, const Condition& c, Duration d)) {
  GUARDED(c, m);
  const bool r =
      __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(m, guarded_condition, d);
  Acquire(m);
  return r;
}
WRAP(_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
     bool, (Mutex * m, const Condition& c, Time t)) {
  GUARDED(c, m);
  const bool r =
      __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(m, guarded_condition, t);
  Acquire(m);
  return r;
}
WRAP(_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
     bool, (Mutex * m, const Condition& c, Duration d)) {
  GUARDED(c, m);
  const bool r =
      __real__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(m, guarded_condition, d);
  Acquire(m);
  return r;
}
WRAP(_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
     bool, (Mutex * m, const Condition& c, Time t)) {
  GUARDED(c, m);
  const bool r =
      __real__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(m, guarded_condition, t);
  Acquire(m);
  return r;
}

// Mutex::Await*: held on entry and on return, released while waiting.
WRAP(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, void,
     (Mutex * m, const Condition& c)) {
  GUARDED(c, m);
  Release(m);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(m, guarded_condition);
  Acquire(m);
}
WRAP(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
     bool, (Mutex * m, const Condition& c, Duration d)) {
  GUARDED(c, m);
  Release(m);
  const bool r =
      __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(m, guarded_condition, d);
  Acquire(m);
  return r;
}
WRAP(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE,
     bool, (Mutex * m, const Condition& c, Time t)) {
  GUARDED(c, m);
  Release(m);
  const bool r =
      __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(m, guarded_condition, t);
  Acquire(m);
  return r;
}

// CondVar: the mutex is released while waiting.
WRAP(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, void,
     (CondVar * cv, Mutex* m)) {
  Release(m);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, m);
  Acquire(m);
}
WRAP(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, bool,
     (CondVar * cv, Mutex* m, Duration d)) {
  Release(m);
  const bool r =
      __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(
          cv, m, d);
  Acquire(m);
  return r;
}
WRAP(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE, bool,
     (CondVar * cv, Mutex* m, Time t)) {
  Release(m);
  const bool r =
      __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(
          cv, m, t);
  Acquire(m);
  return r;
}

// Notification.
WRAP(_ZN4absl7debian312Notification6NotifyEv, void, (Notification * n)) {
  Release(n);
  Release(NotifiedFlag(n));
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}
WRAP(_ZNK4absl7debian312Notification19WaitForNotificationEv, void,
     (const Notification* n)) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  Acquire(n);
}
WRAP(_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
     bool, (const Notification* n, Duration d)) {
  const bool notified =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
          n, d);
  if (notified) Acquire(n);
  return notified;
}
WRAP(_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE,
     bool, (const Notification* n, Time t)) {
  const bool notified =
      __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
          n, t);
  if (notified) Acquire(n);
  return notified;
}

// Barrier and BlockingCounter: every arrival happens before every return.
WRAP(_ZN4absl7debian37Barrier5BlockEv, bool, (Barrier * b)) {
  Release(b);
  const bool last = __real__ZN4absl7debian37Barrier5BlockEv(b);
  Acquire(b);
  return last;
}
WRAP(_ZN4absl7debian315BlockingCounter14DecrementCountEv, bool,
     (BlockingCounter * c)) {
  Release(c);
  return __real__ZN4absl7debian315BlockingCounter14DecrementCountEv(c);
}
WRAP(_ZN4absl7debian315BlockingCounter4WaitEv, void, (BlockingCounter * c)) {
  __real__ZN4absl7debian315BlockingCounter4WaitEv(c);
  Acquire(c);
}

}  // extern "C"
