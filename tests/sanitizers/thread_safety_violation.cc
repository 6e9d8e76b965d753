// Must NOT compile under -Wthread-safety -Werror=thread-safety, and must
// compile without them: it reads a guarded field without holding its lock.
// CMakeLists.txt checks both at configure time with
// BATCHD_THREAD_SAFETY=ON, so the analysis is known to be on rather than
// silently ignored (g++ ignores the annotations).
#include "absl/base/thread_annotations.h"

class ABSL_LOCKABLE Lock {
 public:
  void Acquire() ABSL_EXCLUSIVE_LOCK_FUNCTION() {}
  void Release() ABSL_UNLOCK_FUNCTION() {}
};

class Counter {
 public:
  int Unlocked() { return value_; }  // the violation

 private:
  Lock lock_;
  int value_ ABSL_GUARDED_BY(lock_) = 0;
};

int main() {
  Counter counter;
  return counter.Unlocked();
}
