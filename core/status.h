// core/status.h — Status helpers and invariant checks.
//
// abseil 20220623 ships no status_macros.h, so gtp keeps its own two macros:
//
//   GTP_RETURN_IF_ERROR(DoThing());
//   GTP_ASSIGN_OR_RETURN(Tensor t, MakeTensor(...));
//
// GTP_CHECK is for broken invariants (programmer errors): it prints file:line
// and the message, then aborts. Kernels use GTP_CHECK and never return Status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define GTP_STATUS_CONCAT_INNER_(a, b) a##b
#define GTP_STATUS_CONCAT_(a, b) GTP_STATUS_CONCAT_INNER_(a, b)

#define GTP_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::absl::Status gtp_status_ = (expr);               \
    if (!gtp_status_.ok()) return gtp_status_;         \
  } while (0)

#define GTP_ASSIGN_OR_RETURN(lhs, expr) \
  GTP_ASSIGN_OR_RETURN_IMPL_(GTP_STATUS_CONCAT_(gtp_statusor_, __LINE__), lhs, expr)

#define GTP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()

namespace gtp::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond,
                              const std::string& msg);
}  // namespace gtp::internal

// Aborts with file:line when `cond` is false. Extra arguments are
// concatenated (absl::StrCat) into the message.
#define GTP_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ::gtp::internal::CheckFailed(__FILE__, __LINE__, #cond,                  \
                                   ::absl::StrCat("", ##__VA_ARGS__)); \
    }                                                                          \
  } while (0)

// Aborts when a Status-returning call fails; for tests, tools and main().
#define GTP_CHECK_OK(expr)                                                   \
  do {                                                                       \
    ::absl::Status gtp_check_status_ = (expr);                               \
    GTP_CHECK(gtp_check_status_.ok(), gtp_check_status_.ToString());         \
  } while (0)
