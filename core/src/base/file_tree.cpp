#include "attnscope/base/file_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>
#include <vector>

#include "attnscope/base/error.h"

namespace attnscope {

namespace {

// The first failure of a walk: its errno and the path it happened on.
struct TreeFailure {
  int err = 0;
  std::string path;
  void note(int e, const std::string& p) {
    if (err == 0) err = e, path = p;
  }
};

// Closes a descriptor on every way out (an exception from a visitor included).
class TreeFd {
 public:
  explicit TreeFd(int fd) : fd_(fd) {}
  ~TreeFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  TreeFd(const TreeFd&) = delete;
  TreeFd& operator=(const TreeFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

struct TreeEntry {
  std::string name;
  unsigned char type;  // d_type: DT_DIR, DT_REG, DT_LNK, ... or DT_UNKNOWN
};

// The entries of the open folder `fd` but "." and "..", read whole before anything is changed
// (so removing while reading never skips an entry). Reads through a duplicate, so `fd` stays ours
// and no DIR stream is held while the caller recurses: one descriptor per level of depth.
bool list_folder(int fd, std::vector<TreeEntry>& out, int& err) {
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return err = errno, false;
  DIR* dir = ::fdopendir(dup);
  if (!dir) {
    err = errno;
    ::close(dup);
    return false;
  }
  ::rewinddir(dir);  // the duplicate shares the file offset
  err = 0;
  for (;;) {
    errno = 0;
    const struct dirent* e = ::readdir(dir);
    if (!e) {
      err = errno;
      break;
    }
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    out.push_back({n, e->d_type});
  }
  ::closedir(dir);
  return err == 0;
}

// The entry's kind (S_IFDIR, S_IFREG, S_IFLNK, ...) without following a link, or 0 with `err` set.
mode_t kind_of(int dirfd, const TreeEntry& e, int& err, struct stat* st = nullptr) {
  if (!st) {
    switch (e.type) {
      case DT_DIR: return S_IFDIR;
      case DT_REG: return S_IFREG;
      case DT_LNK: return S_IFLNK;
      case DT_UNKNOWN: break;
      default: return S_IFIFO;  // fifo, socket, device: not a folder, not a regular file
    }
  }
  struct stat local;
  struct stat* s = st ? st : &local;
  if (::fstatat(dirfd, e.name.c_str(), s, AT_SYMLINK_NOFOLLOW) != 0) return err = errno, mode_t(0);
  return s->st_mode & S_IFMT;
}

const int kOpenFolder = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

bool remove_contents(int fd, const std::string& path, TreeFailure& f);

// Removes the entry `e` of the open folder `dirfd` (whose path is `path`).
bool remove_entry(int dirfd, const std::string& path, const TreeEntry& e, TreeFailure& f) {
  const std::string child = path + "/" + e.name;
  int err = 0;
  const mode_t kind = kind_of(dirfd, e, err);
  if (kind == 0) {
    if (err == ENOENT) return true;  // gone meanwhile
    f.note(err, child);
    return false;
  }
  if (kind != S_IFDIR) {
    if (::unlinkat(dirfd, e.name.c_str(), 0) == 0 || errno == ENOENT) return true;
    if (errno != EISDIR && errno != EPERM) {
      f.note(errno, child);
      return false;
    }
    // Replaced by a folder since it was listed (Linux says EISDIR, POSIX EPERM): remove it as one.
  }
  const int c = ::openat(dirfd, e.name.c_str(), kOpenFolder);
  if (c < 0) {
    const int open_err = errno;
    if (open_err == ENOENT) return true;
    if (open_err == ENOTDIR || open_err == ELOOP) {  // a link or file now: unlink it, never follow
      if (::unlinkat(dirfd, e.name.c_str(), 0) == 0 || errno == ENOENT) return true;
      f.note(errno, child);
      return false;
    }
    f.note(open_err, child);
    return false;
  }
  {
    TreeFd sub(c);
    if (!remove_contents(sub.get(), child, f)) return false;
  }
  if (::unlinkat(dirfd, e.name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return true;
  f.note(errno, child);
  return false;
}

bool remove_contents(int fd, const std::string& path, TreeFailure& f) {
  std::vector<TreeEntry> entries;
  int err = 0;
  if (!list_folder(fd, entries, err)) {
    f.note(err, path);
    return false;
  }
  for (const TreeEntry& e : entries)
    if (!remove_entry(fd, path, e, f)) return false;
  return true;
}

void walk_folder(int fd, const std::string& path, const TreeFileVisitor& visit, TreeFailure& f) {
  std::vector<TreeEntry> entries;
  int err = 0;
  if (!list_folder(fd, entries, err)) {
    f.note(err, path);  // what was read before the failure is not trusted: skip the folder
    return;
  }
  for (const TreeEntry& e : entries) {
    const std::string child = path + "/" + e.name;
    struct stat st;
    const bool need_stat = e.type == DT_REG || e.type == DT_UNKNOWN;
    const mode_t kind = kind_of(fd, e, err, need_stat ? &st : nullptr);
    if (kind == 0) {
      if (err != ENOENT) f.note(err, child);
      continue;
    }
    if (kind == S_IFREG) {
      visit(TreeFile{child, uint64_t(st.st_size)});
    } else if (kind == S_IFDIR) {
      const int c = ::openat(fd, e.name.c_str(), kOpenFolder);
      if (c < 0) {
        // Gone, or no longer a folder (a link now: not followed): nothing of the tree to list.
        if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP) f.note(errno, child);
        continue;
      }
      TreeFd sub(c);
      walk_folder(sub.get(), child, visit, f);
    }
  }
}

// `p` without trailing slashes: "link/" would make the OS resolve the link, so it is read as
// "link", the link itself. "" for "" and for "/" (and "//"...).
std::string without_trailing_slashes(const std::string& p) {
  std::string s = p;
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

bool report_tree_failure(const TreeFailure& f, std::error_code& ec, std::string* failed) {
  if (f.err == 0) return true;
  ec.assign(f.err, std::generic_category());
  if (failed) *failed = f.path;
  return false;
}

}  // namespace

bool remove_tree(const std::string& path_in, std::error_code& ec, std::string* failed) noexcept {
  ec.clear();
  TreeFailure f;
  try {
    if (path_in.empty()) return true;  // names nothing
    const std::string path = without_trailing_slashes(path_in);
    if (path.empty()) {
      f.note(EPERM, path_in);  // the root folder: never
      return report_tree_failure(f, ec, failed);
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return true;  // missing: nothing to do
      f.note(errno, path);
      return report_tree_failure(f, ec, failed);
    }
    bool as_folder = S_ISDIR(st.st_mode);
    if (!as_folder) {
      if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
      if (errno == EISDIR || errno == EPERM) as_folder = true;  // replaced by a folder meanwhile
      else f.note(errno, path);
    }
    if (as_folder && f.err == 0) {
      const int c = ::open(path.c_str(), kOpenFolder);
      if (c < 0) {
        const int open_err = errno;
        if (open_err == ENOTDIR || open_err == ELOOP) {
          if (::unlink(path.c_str()) != 0 && errno != ENOENT) f.note(errno, path);
        } else if (open_err != ENOENT) {
          f.note(open_err, path);
        }
      } else {
        bool ok;
        {
          TreeFd top(c);
          ok = remove_contents(top.get(), path, f);
        }
        if (ok && ::rmdir(path.c_str()) != 0 && errno != ENOENT) f.note(errno, path);
      }
    }
  } catch (const std::bad_alloc&) {
    f.note(ENOMEM, path_in);
  }
  return report_tree_failure(f, ec, failed);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::string failed;
  if (!remove_tree(path, ec, &failed)) fail(failed, "cannot be removed: " + ec.message());
}

bool walk_files(const std::string& dir_in, const TreeFileVisitor& visit, std::error_code& ec, std::string* failed) {
  ec.clear();
  TreeFailure f;
  if (dir_in.empty()) return true;
  std::string dir = without_trailing_slashes(dir_in);
  if (dir.empty()) dir = "/";  // "/" is a folder like any other to list
  const int c = ::open(dir.c_str(), kOpenFolder);
  if (c < 0) {
    if (errno == ENOENT) return true;  // missing: nothing to list
    f.note(errno == ELOOP ? ENOTDIR : errno, dir);  // a link is not followed, not even at the top
    return report_tree_failure(f, ec, failed);
  }
  TreeFd top(c);
  walk_folder(top.get(), dir == "/" ? "" : dir, visit, f);
  if (f.path.empty() && f.err != 0) f.path = "/";
  return report_tree_failure(f, ec, failed);
}

void walk_files(const std::string& dir, const TreeFileVisitor& visit) {
  std::error_code ec;
  std::string failed;
  if (!walk_files(dir, visit, ec, &failed)) fail(failed, "cannot be listed: " + ec.message());
}

}  // namespace attnscope
