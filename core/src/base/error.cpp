#include "attnscope/error.h"

namespace attnscope {

void fail(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

}  // namespace attnscope
