// Status helpers missing from Abseil 20220623: RETURN_IF_ERROR and
// ASSIGN_OR_RETURN, in the spirit of the later absl/status/status_macros.h.
//
//   RETURN_IF_ERROR(file.Open(path));
//   ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
#ifndef BATCHD_COMMON_STATUS_MACROS_H_
#define BATCHD_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define BATCHD_CONCAT_INNER_(a, b) a##b
#define BATCHD_CONCAT_(a, b) BATCHD_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                            \
  do {                                                   \
    ::absl::Status batchd_status_ = (expr);              \
    if (!batchd_status_.ok()) return batchd_status_;     \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise moves the value into `lhs` (a declaration or an lvalue).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  BATCHD_ASSIGN_OR_RETURN_IMPL_(BATCHD_CONCAT_(batchd_statusor_, __LINE__), lhs, rexpr)

#define BATCHD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // BATCHD_COMMON_STATUS_MACROS_H_
