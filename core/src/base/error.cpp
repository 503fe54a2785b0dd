#include "attnscope/base/error.h"

namespace attnscope {

void fail(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

void fail_value(const std::string& quantity, const std::string& what) {
  throw Error(quantity + " " + what, quantity);
}

}  // namespace attnscope
