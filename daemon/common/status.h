// Status and Result<T>: how every partrain library reports failure. No exception leaves a
// library function, the plugin ABI, a SPANK callback or a socket handler; callers check.
// A message is written for the user: it names the thing that is wrong and how to fix it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace partrain {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input: spec, TOML, command line (exit code 2)
  kNotFound,         // a file or key that should be there is not
  kIoError,          // the operating system refused a read/write
  kCorruption,       // data on disk fails its checksum or format check
  kUnavailable,      // a peer or device is gone; retrying elsewhere may help
  kInternal,         // a bug in partrain
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status invalid(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status io_error(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Same code, with context put in front: "job.toml: " + "line 3: unknown key 'x'".
  Status prefixed(const std::string& context) const {
    return is_ok() ? *this : Status(code_, context + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace partrain

// Return early from a function returning Status or Result<T> when `expr` failed.
#define PARTRAIN_RETURN_IF_ERROR(expr)               \
  do {                                               \
    ::partrain::Status partrain_status_ = (expr);    \
    if (!partrain_status_.is_ok()) return partrain_status_; \
  } while (0)
