// The one exception type of attnscope. Every message names the file (or input) and the problem, so
// the CLI can print it as is and exit 1.
#pragma once
#include <stdexcept>
#include <string>

namespace attnscope {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Error("<where>: <what>").
[[noreturn]] void fail(const std::string& where, const std::string& what);

}  // namespace attnscope
