// Writing a whole text file so that a reader never sees half of it: the bytes go to PATH.tmp,
// which is renamed over PATH only once they are all on disk.
#pragma once
#include <string>

namespace attnscope {

// Throws Error naming the file when it cannot be written or moved into place (PATH.tmp removed).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace attnscope
