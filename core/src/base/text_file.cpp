#include "attnscope/base/text_file.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "attnscope/base/error.h"

namespace attnscope {

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create the file");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      fail(path, "write error");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    fail(path, "cannot move the file into place: " + why);
  }
}

}  // namespace attnscope
