// The one exception type of attnscope. Every message names the file (or input) and the problem, so
// the CLI can print it as is and exit 1.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace attnscope {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  Error(const std::string& message, std::string quantity)
      : std::runtime_error(message), quantity_(std::move(quantity)) {}
  // The user-facing quantity a bad value was given for ("sequence length", "budget"), or "" when
  // the error is about a file or data. The CLI names the option that sets it.
  const std::string& quantity() const { return quantity_; }

 private:
  std::string quantity_;
};

// Work stopped because the caller asked (a ProgressFn threw it): not a failure, nothing written.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

// Throws Error("<where>: <what>").
[[noreturn]] void fail(const std::string& where, const std::string& what);

// A bad value of a quantity the user chose: throws Error("<quantity> <what>") with quantity() set,
// e.g. fail_value("sequence length", "1024 exceeds the model's context length 512").
[[noreturn]] void fail_value(const std::string& quantity, const std::string& what);

}  // namespace attnscope
