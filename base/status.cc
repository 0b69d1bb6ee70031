#include "base/status.h"

namespace dflash {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kCorruption: return "Corruption";
    case ErrorCode::kBusy: return "Busy";
    case ErrorCode::kIoError: return "IoError";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kReadOnly: return "ReadOnly";
    case ErrorCode::kCompileError: return "CompileError";
    case ErrorCode::kLaunchError: return "LaunchError";
    case ErrorCode::kMismatch: return "Mismatch";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kCancelled: return "Cancelled";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(ErrorCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status out(code_, context + ": " + message_);
  out.detail_ = detail_;
  return out;
}

Status Status::WithDetail(std::string detail) const {
  Status out = *this;
  out.detail_ = std::move(detail);
  return out;
}

}  // namespace dflash
