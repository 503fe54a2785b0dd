#include "base/output_dir.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "attnscope/base/error.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// Removes DIR.partial-PID and DIR.old-PID siblings whose process is gone: what a writer killed
// with SIGKILL (no destructor ran) left behind. A live writer's sibling is kept.
void remove_debris_of_dead_writers(const fs::path& final_dir) {
  std::error_code ec;
  const std::string stem = final_dir.filename().string();
  for (const auto& e : fs::directory_iterator(final_dir.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    for (const std::string tag : {".partial-", ".old-"}) {
      if (name.rfind(stem + tag, 0) != 0) continue;
      const std::string pid = name.substr(stem.size() + tag.size());
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
      if (::kill(pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
      std::error_code ignored;
      fs::remove_all(e.path(), ignored);
    }
  }
}

}  // namespace

OutputDir::OutputDir(const std::string& final_dir) {
  fs::path out = fs::absolute(final_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/" names dir
  if (fs::exists(out) && !fs::is_directory(out)) fail(final_dir, "exists and is not a directory");
  if (!fs::is_directory(out.parent_path())) fail(final_dir, "the parent directory does not exist");
  final_ = out.string();
  tmp_ = final_ + ".partial-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // left over by a process with our pid that was killed
  remove_debris_of_dead_writers(out);
  if (!fs::create_directory(tmp_, ec) || ec) fail(final_dir, "cannot create " + tmp_ + ": " + ec.message());
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

std::string OutputDir::file(const std::string& relative) const { return (fs::path(tmp_) / relative).string(); }

void OutputDir::commit() {
  std::error_code ec;
  if (!fs::exists(final_)) {
    fs::rename(tmp_, final_, ec);
  } else {
    const std::string old = final_ + ".old-" + std::to_string(::getpid());
    fs::remove_all(old, ec);
    fs::rename(final_, old, ec);
    if (!ec) {
      fs::rename(tmp_, final_, ec);
      std::error_code ignored;
      if (ec) fs::rename(old, final_, ignored);  // put the earlier version back
      else fs::remove_all(old, ignored);
    }
  }
  if (ec) fail(final_, "cannot move the finished output into place: " + ec.message());
  committed_ = true;
}

}  // namespace attnscope
