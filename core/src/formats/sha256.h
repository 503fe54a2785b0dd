// SHA-256 (FIPS 180-4), for the "source" of a converted model: which weights it was made from,
// checkable with any sha256sum (source_weights.h says which files).
#pragma once
#include <string>
#include <vector>

namespace attnscope::convert {

// Lower-case hex digest of the files' bytes one after another (`cat FILES | sha256sum`). Throws
// Error naming a file that cannot be read.
std::string sha256_files(const std::vector<std::string>& paths);
// The same of a string (for tests against published vectors).
std::string sha256_text(const std::string& text);

}  // namespace attnscope::convert
