#include "attnscope/workbench/workspace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

int64_t seconds_since_epoch(fs::file_time_type t) {
  // file_time_type's clock is not the system clock in C++17: convert through now() of both.
  const auto sys = std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(t - fs::file_time_type::clock::now());
  return std::chrono::duration_cast<std::chrono::seconds>(sys.time_since_epoch()).count();
}

std::string normal(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
  if (ec) c = fs::absolute(p).lexically_normal();
  std::string s = c.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

WorkspaceFolder describe(const fs::path& dir) {
  WorkspaceFolder f;
  f.path = dir.string();
  std::error_code ec;
  f.modified_s = seconds_since_epoch(fs::last_write_time(dir, ec));
  // Regular files only: a link's target is not the workspace's to count; an unreadable subfolder
  // is skipped (its failure is not the listing's).
  std::error_code walk_ec;
  walk_files(dir.string(), [&f](const TreeFile& file) { f.bytes += file.bytes; }, walk_ec);
  f.capture = fs::is_directory(dir / "capture", ec);
  f.spectra = fs::is_regular_file(dir / "spectra.safetensors", ec);
  for (auto it = fs::directory_iterator(dir / "runs", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory()) ++f.runs;
  return f;
}

}  // namespace

std::string default_workspace_root() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg && fs::path(xdg).is_absolute()) return (fs::path(xdg) / "attnscope" / "workspace").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "attnscope" / "workspace").string();
}

std::vector<WorkspaceFolder> list_workspace(const std::string& root) {
  std::vector<WorkspaceFolder> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory() && !it->is_symlink()) out.push_back(describe(fs::absolute(it->path())));
  if (ec) fail(root, "cannot be listed: " + ec.message());
  std::sort(out.begin(), out.end(), [](const WorkspaceFolder& a, const WorkspaceFolder& b) {
    return a.modified_s != b.modified_s ? a.modified_s > b.modified_s : a.path > b.path;
  });
  return out;
}

uint64_t total_bytes(const std::vector<WorkspaceFolder>& folders) {
  uint64_t n = 0;
  for (const WorkspaceFolder& f : folders) n += f.bytes;
  return n;
}

void remove_workspace_folder(const std::string& root, const std::string& folder) {
  if (fs::path(normal(folder)).parent_path() != fs::path(normal(root)))
    fail(folder, "is not a folder of the workspace " + root);
  remove_tree(folder);  // Error naming the entry it failed on
}

std::vector<WorkspaceFolder> clean_workspace(const std::string& root, const std::vector<std::string>& keep,
                                             double older_than_days) {
  std::vector<std::string> kept;
  for (const std::string& k : keep)
    if (!k.empty()) kept.push_back(normal(k));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const double cutoff = double(now) - older_than_days * 86400.0;
  std::vector<WorkspaceFolder> removed;
  for (const WorkspaceFolder& f : list_workspace(root)) {
    if (std::find(kept.begin(), kept.end(), normal(f.path)) != kept.end()) continue;
    if (older_than_days > 0 && double(f.modified_s) >= cutoff) continue;
    remove_workspace_folder(root, f.path);
    removed.push_back(f);
  }
  return removed;
}

std::string human_bytes(uint64_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

}  // namespace attnscope
