// SHA-256 of a file (FIPS 180-4), for the "source" of a converted model: which weights it was made
// from, checkable with any sha256sum.
#pragma once
#include <string>

namespace attnscope::convert {

// Lower-case hex digest of the file's bytes. Throws Error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);
// The same of a string (for tests against published vectors).
std::string sha256_text(const std::string& text);

}  // namespace attnscope::convert
