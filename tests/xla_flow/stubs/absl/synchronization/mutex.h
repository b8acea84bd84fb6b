// Test stand-in for absl::Mutex and absl::MutexLock over std::mutex (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_SYNCHRONIZATION_MUTEX_H_
#define XLA_FLOW_STUB_ABSL_SYNCHRONIZATION_MUTEX_H_

#include <mutex>

namespace absl {

enum ConstInitType { kConstInit };

class Mutex {
 public:
  Mutex() = default;
  constexpr explicit Mutex(ConstInitType) {}
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  std::mutex mutex_;
};

class MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() { mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_SYNCHRONIZATION_MUTEX_H_
