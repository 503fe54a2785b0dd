#include "attnscope/base/output_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// The pid of NAME = STEM + TAG + digits, or 0 when NAME is no such sibling.
long sibling_pid(const std::string& name, const std::string& stem, const std::string& tag) {
  if (name.size() <= stem.size() + tag.size() || name.compare(0, stem.size() + tag.size(), stem + tag) != 0) return 0;
  const std::string pid = name.substr(stem.size() + tag.size());
  if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) return 0;
  return std::stol(pid);
}

bool process_gone(long pid) { return pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH; }

// What writers killed outright (SIGKILL: no destructor ran) left in `folder`, for every output in
// it: X.partial-PID (an unfinished output) is removed; X.old-PID (the previous X, set aside by a
// commit that was killed before its second rename) is put back as X when X is missing, else removed.
// A live writer's siblings are kept.
void recover_dead_writers(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(folder, ec)) entries.push_back(e.path());
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    for (const std::string tag : {".partial-", ".old-"}) {
      const auto at = name.rfind(tag);
      if (at == std::string::npos || at == 0) continue;
      const std::string stem = name.substr(0, at);
      const long pid = sibling_pid(name, stem, tag);
      if (!process_gone(pid)) continue;  // alive, not ours to judge, or not a sibling
      std::error_code ignored;
      const fs::path final_dir = folder / stem;
      if (tag == ".old-" && !fs::exists(final_dir)) fs::rename(p, final_dir, ignored);
      else remove_tree(p.string(), ignored);
    }
  }
}

// Exchanges two paths atomically (Linux renameat2 RENAME_EXCHANGE); false where the file system
// cannot.
bool exchange_paths(const std::string& a, const std::string& b) {
#ifdef RENAME_EXCHANGE
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a, (void)b;
  return false;
#endif
}

}  // namespace

std::vector<std::string> killed_writer_debris(const std::string& path) {
  std::vector<std::string> out;
  fs::path p = fs::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    for (const std::string tag : {".partial-", ".old-"}) {
      const auto at = name.rfind(tag);
      if (at == std::string::npos || at == 0) continue;
      if (process_gone(sibling_pid(name, name.substr(0, at), tag))) out.push_back(e.path().string());
    }
  }
  return out;
}

void recover_killed_writers(const std::string& path) {
  fs::path p = fs::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  recover_dead_writers(p.parent_path());
}

OutputDir::OutputDir(const std::string& final_dir) {
  fs::path out = fs::absolute(final_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/" names dir
  if (fs::exists(out) && !fs::is_directory(out)) fail(final_dir, "exists and is not a directory");
  if (!fs::is_directory(out.parent_path())) fail(final_dir, "the parent directory does not exist");
  final_ = out.string();
  tmp_ = final_ + ".partial-" + std::to_string(::getpid());
  std::error_code ec;
  remove_tree(tmp_, ec);  // left over by a process with our pid that was killed
  recover_dead_writers(out.parent_path());
  if (!fs::create_directory(tmp_, ec) || ec) fail(final_dir, "cannot create " + tmp_ + ": " + ec.message());
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  remove_tree(tmp_, ec);
}

std::string OutputDir::file(const std::string& relative) const { return (fs::path(tmp_) / relative).string(); }

void OutputDir::commit() {
  std::error_code ec;
  if (!fs::exists(final_)) {
    fs::rename(tmp_, final_, ec);
  } else if (exchange_paths(tmp_, final_)) {
    // One atomic step: DIR is the new output, the sibling holds the old one (swept if we die now).
    std::error_code ignored;
    remove_tree(tmp_, ignored);
  } else {
    // Two renames; killed between them, the next writer in this folder puts DIR.old-PID back.
    const std::string old = final_ + ".old-" + std::to_string(::getpid());
    remove_tree(old, ec);
    fs::rename(final_, old, ec);
    if (!ec) {
      fs::rename(tmp_, final_, ec);
      std::error_code ignored;
      if (ec) fs::rename(old, final_, ignored);  // put the earlier version back
      else remove_tree(old, ignored);
    }
  }
  if (ec) fail(final_, "cannot move the finished output into place: " + ec.message());
  committed_ = true;
}

}  // namespace attnscope
