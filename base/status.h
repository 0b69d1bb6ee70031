// Status and Result<T>: the error type that crosses every library boundary of dflash-tune.
// Owns: the error codes and their messages. Library code returns these and never exits or prints;
// only the tools/ mains turn a Status into an exit code and a one-line message.
// Thread-safety: plain values, freely copied between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dflash {

enum class ErrorCode {
  kOk = 0,
  kNotFound,       // a key, entry or file that does not exist
  kCorruption,     // checksum mismatch, malformed database, truncated file
  kBusy,           // a lock or the database stayed busy past the retry budget
  kIoError,        // the OS refused a file operation
  kInvalidArgument,
  kUnsupported,    // wrong arch, newer schema, network filesystem, no GPU
  kReadOnly,       // a write was asked of a cache opened read-only
  kCompileError,   // NVRTC failed
  kLaunchError,    // a CUDA driver call failed
  kMismatch,       // a kernel's output differs from its reference
  kTimeout,
  kCancelled,     // the user stopped the work (a signal); what was done is saved
  kInternal,
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "Corruption: checksum mismatch in entry ..." (or "OK").
  std::string ToString() const;
  // Same code, message prefixed with context: "opening cache: <message>" (the detail is kept).
  Status WithContext(const std::string& context) const;
  // The low-level text behind the message (e.g. SQLite's statement and error), for a --verbose line or a log;
  // the message itself says what is wrong in the user's terms.
  const std::string& detail() const { return detail_; }
  Status WithDetail(std::string detail) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string detail_;
};

inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status Corruption(std::string m) { return {ErrorCode::kCorruption, std::move(m)}; }
inline Status Busy(std::string m) { return {ErrorCode::kBusy, std::move(m)}; }
inline Status IoError(std::string m) { return {ErrorCode::kIoError, std::move(m)}; }
inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status Unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status ReadOnlyError(std::string m) { return {ErrorCode::kReadOnly, std::move(m)}; }
inline Status Cancelled(std::string m) { return {ErrorCode::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// A value or an error. Result<T> r = f(); if (!r.ok()) return r.status(); use *r.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}     // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dflash

// Early-return helpers for Status / Result.
#define DFLASH_CONCAT_INNER(a, b) a##b
#define DFLASH_CONCAT(a, b) DFLASH_CONCAT_INNER(a, b)
#define DFLASH_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::dflash::Status _st = (expr);                \
    if (!_st.ok()) return _st;                    \
  } while (0)
#define DFLASH_ASSIGN_OR_RETURN(lhs, expr)                          \
  auto DFLASH_CONCAT(_res_, __LINE__) = (expr);                     \
  if (!DFLASH_CONCAT(_res_, __LINE__).ok())                         \
    return DFLASH_CONCAT(_res_, __LINE__).status();                 \
  lhs = std::move(DFLASH_CONCAT(_res_, __LINE__)).value()
