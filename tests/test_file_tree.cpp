// remove_tree and walk_files (core/base/file_tree.h): checked against the tree each test builds
// itself (the set of files it wrote, with their sizes), with links pointing out of the tree whose
// targets must survive; and a lint that keeps std::filesystem's recursive walks out of the sources
// (pytorch issue 133437: pip's LibTorch exports its own copies of them).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"
#include "test_support.h"

namespace test_file_tree {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

bool lexists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

void write_bytes(const std::string& path, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << std::string(n, 'x');
  ASSERT_TRUE(out.good()) << path;
}

// A tree under `root` + "/tree" and link targets under `root` + "/outside"; `files` gets every
// regular file written inside the tree with its size: the independent listing.
struct Tree {
  std::string dir, outside;
  std::map<std::string, uint64_t> files;
};

Tree make_tree(const std::string& root) {
  Tree t;
  t.dir = root + "/tree";
  t.outside = root + "/outside";
  fs::create_directories(t.outside + "/target_dir/inner");
  write_bytes(t.outside + "/target.txt", 11);
  write_bytes(t.outside + "/target_dir/keep.txt", 12);
  write_bytes(t.outside + "/target_dir/inner/deep.txt", 13);

  auto file = [&t](const std::string& rel, size_t n) {
    write_bytes(t.dir + "/" + rel, n);
    t.files[t.dir + "/" + rel] = n;
  };
  for (const char* d : {"", "/sub dir", "/deep/a/b/c/d/e", "/empty", "/many", "/links", "/sp\xc3\xa4" "ce \xe2\x98\x83"})
    fs::create_directories(t.dir + d);
  file("top.txt", 5);
  file("sub dir/\xc3\xbcn\xc3\xaf c\xc3\xb8" "d\xc3\xa9 \xe2\x98\x83.txt", 7);  // "ünï cødé ☃.txt"
  file("sp\xc3\xa4" "ce \xe2\x98\x83/bad\xff" "byte", 3);                          // not UTF-8: names are bytes
  file("deep/a/b/c/d/e/bottom.bin", 4096);
  file("deep/a/mid.bin", 0);
  file(".hidden", 1);
  for (int i = 0; i < 2000; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "many/f%04d", i);
    file(name, size_t(i % 97));
  }
  // Links out of the tree (to a file, a folder, nothing) and inside it: none is a file of the tree.
  fs::create_symlink(t.outside + "/target.txt", t.dir + "/links/to_file");
  fs::create_directory_symlink(t.outside + "/target_dir", t.dir + "/links/to_dir");
  fs::create_directory_symlink(t.outside + "/target_dir", t.dir + "/deep/a/b/to_dir_deep");
  fs::create_symlink(t.outside + "/no such thing", t.dir + "/links/dangling");
  fs::create_symlink("../top.txt", t.dir + "/links/inside");
  EXPECT_EQ(::mkfifo((t.dir + "/links/fifo").c_str(), 0600), 0) << "a fifo is neither a file nor a folder";
  return t;
}

// The link targets are whole: same files, same sizes.
void expect_outside_intact(const Tree& t) {
  for (const auto& [rel, n] : std::map<std::string, uint64_t>{
           {"/target.txt", 11}, {"/target_dir/keep.txt", 12}, {"/target_dir/inner/deep.txt", 13}}) {
    std::error_code ec;
    EXPECT_EQ(fs::file_size(t.outside + rel, ec), n) << t.outside + rel << " (a link's target) was touched";
  }
}

std::map<std::string, uint64_t> walk(const std::string& dir, std::error_code& ec, std::string* failed = nullptr) {
  std::map<std::string, uint64_t> seen;
  walk_files(dir, [&seen](const TreeFile& f) {
    EXPECT_TRUE(seen.emplace(f.path, f.bytes).second) << f.path << " listed twice";
  }, ec, failed);
  return seen;
}

}  // namespace

TEST(FileTree, WalkFilesListsExactlyTheFilesOfTheTree) {
  const Tree t = make_tree(test::temp_dir("filetree"));
  std::error_code ec;
  std::string failed;
  const auto seen = walk(t.dir, ec, &failed);
  EXPECT_FALSE(ec) << failed << ": " << ec.message();
  EXPECT_EQ(seen.size(), t.files.size());
  for (const auto& [path, bytes] : t.files) {
    const auto it = seen.find(path);
    if (it == seen.end()) ADD_FAILURE() << "not listed: " << path;
    else EXPECT_EQ(it->second, bytes) << path;
  }
  for (const auto& [path, bytes] : seen)
    EXPECT_TRUE(t.files.count(path)) << "listed but not a file of the tree (a link followed?): " << path;
  // "dir/" is the same folder; the throwing form lists the same.
  std::error_code ec2;
  EXPECT_EQ(walk(t.dir + "/", ec2), seen);
  size_t n = 0;
  walk_files(t.dir, [&n](const TreeFile&) { ++n; });
  EXPECT_EQ(n, t.files.size());
  expect_outside_intact(t);
}

TEST(FileTree, RemoveTreeRemovesTheTreeAndNoLinkTarget) {
  const Tree t = make_tree(test::temp_dir("filetree"));
  std::error_code ec;
  std::string failed;
  EXPECT_TRUE(remove_tree(t.dir, ec, &failed)) << failed << ": " << ec.message();
  EXPECT_FALSE(ec);
  EXPECT_FALSE(lexists(t.dir)) << "the tree is still there";
  expect_outside_intact(t);
  // Again: now missing, nothing to do.
  EXPECT_TRUE(remove_tree(t.dir, ec));
  EXPECT_FALSE(ec);

  // The throwing form, on a second tree, given with a trailing slash.
  const Tree t2 = make_tree(test::temp_dir("filetree"));
  EXPECT_EQ(test::error_of([&] { remove_tree(t2.dir + "/"); }), "");
  EXPECT_FALSE(lexists(t2.dir));
  expect_outside_intact(t2);
}

TEST(FileTree, MissingPathIsNothingToDo) {
  const std::string root = test::temp_dir("filetree");
  write_bytes(root + "/a_file", 3);
  for (const std::string& missing : {root + "/missing", root + "/missing/below", root + "/a_file/below", std::string()}) {
    std::error_code ec = std::make_error_code(std::errc::io_error);
    std::string failed = "untouched";
    EXPECT_TRUE(remove_tree(missing, ec, &failed)) << missing;
    EXPECT_FALSE(ec) << missing;
    EXPECT_EQ(failed, "untouched") << "no failure to name";
    EXPECT_EQ(test::error_of([&] { remove_tree(missing); }), "") << missing;
    if (missing.find("a_file/") == std::string::npos) {
      std::error_code wec;
      EXPECT_TRUE(walk(missing, wec).empty());
      EXPECT_FALSE(wec) << missing;
    }
  }
  EXPECT_TRUE(lexists(root + "/a_file"));
}

TEST(FileTree, APathThatIsAFileOrALink) {
  const std::string root = test::temp_dir("filetree");
  write_bytes(root + "/file", 3);
  write_bytes(root + "/sibling", 4);
  fs::create_directories(root + "/target/inner");
  write_bytes(root + "/target/inner/kept", 5);
  fs::create_directory_symlink(root + "/target", root + "/link");
  fs::create_directory_symlink(root + "/target", root + "/link2");

  // walk_files wants a folder and does not follow a link, not even the one it is given.
  for (const std::string& p : {root + "/file", root + "/link"}) {
    std::error_code ec;
    std::string failed;
    EXPECT_TRUE(walk(p, ec, &failed).empty()) << p;
    EXPECT_EQ(ec, std::make_error_code(std::errc::not_a_directory)) << p << ": " << ec.message();
    EXPECT_EQ(failed, p);
    const std::string msg = test::error_of([&] { walk_files(p, [](const TreeFile&) {}); });
    EXPECT_NE(msg.find(p + ": cannot be listed: "), std::string::npos) << msg;
  }

  // remove_tree unlinks a file and a link (with or without a trailing slash), never the target.
  std::error_code ec;
  EXPECT_TRUE(remove_tree(root + "/file", ec)) << ec.message();
  EXPECT_TRUE(remove_tree(root + "/link", ec)) << ec.message();
  EXPECT_TRUE(remove_tree(root + "/link2/", ec)) << ec.message();
  EXPECT_FALSE(lexists(root + "/file"));
  EXPECT_FALSE(lexists(root + "/link"));
  EXPECT_FALSE(lexists(root + "/link2"));
  EXPECT_TRUE(lexists(root + "/sibling"));
  EXPECT_TRUE(lexists(root + "/target/inner/kept")) << "a link's target was removed";

  // The root folder is never removed.
  std::string failed;
  EXPECT_FALSE(remove_tree("/", ec, &failed));
  EXPECT_EQ(failed, "/");
}

// A failure half way down (here: out of file descriptors, which root cannot bypass, unlike
// permissions) stops the removal at that entry, names it, and leaves the rest; walk_files skips
// the folder it cannot open and lists the others.
TEST(FileTree, AFailureHalfWayDownIsReportedNamingTheEntry) {
  const std::string root = test::temp_dir("filetree");
  std::string deep = root + "/t";
  std::map<std::string, uint64_t> shallow;
  for (int i = 0; i < 24; ++i) {
    deep += "/d" + std::to_string(i);
    fs::create_directories(deep);
    if (i < 1) {
      write_bytes(deep + "/f", 1);
      shallow[deep + "/f"] = 1;
    }
  }
  write_bytes(deep + "/bottom", 2);

  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // the lowest free descriptor
  ASSERT_GE(probe, 0);
  ::close(probe);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old_limit), 0);
  struct rlimit low = old_limit;
  low.rlim_cur = rlim_t(probe) + 8;  // room for a few levels of the 24
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::error_code ec, wec;
  std::string failed, wfailed, thrown;
  const bool removed = remove_tree(root + "/t", ec, &failed);
  const auto listed = walk(root + "/t", wec, &wfailed);
  thrown = test::error_of([&] { remove_tree(root + "/t"); });
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old_limit), 0);

  EXPECT_FALSE(removed);
  EXPECT_EQ(ec.value(), EMFILE) << ec.message();
  EXPECT_EQ(failed.rfind(root + "/t/d0/d1", 0), 0u) << "names the entry below the tree: " << failed;
  EXPECT_NE(thrown.find(": cannot be removed: "), std::string::npos) << thrown;
  EXPECT_EQ(thrown.rfind(root + "/t/d0/d1", 0), 0u) << thrown;
  EXPECT_TRUE(lexists(deep + "/bottom")) << "nothing below the failure is removed";
  EXPECT_TRUE(lexists(root + "/t/d0/f")) << "the failure stops the removal";

  EXPECT_EQ(wec.value(), EMFILE) << wec.message();
  EXPECT_EQ(wfailed.rfind(root + "/t/d0/d1", 0), 0u) << wfailed;
  EXPECT_EQ(listed, shallow) << "the files above the failure are listed, the rest skipped";

  // With descriptors back, both finish.
  std::error_code ec3;
  EXPECT_EQ(walk(root + "/t", ec3).size(), 2u);
  EXPECT_FALSE(ec3);
  EXPECT_TRUE(remove_tree(root + "/t", ec3)) << ec3.message();
  EXPECT_FALSE(lexists(root + "/t"));
}

// A read-only subfolder of the tree: as remove_all, permissions are not changed, so a user that
// cannot write into it gets EACCES naming the entry inside it; root (DAC override) removes it all.
// Run as root, the user's case runs in a child process switched to nobody (65534).
TEST(FileTree, AReadOnlySubfolderFailsForItsOwnerAndNotForRoot) {
  const std::string root = test::temp_dir("filetree");
  ::chmod(root.c_str(), 0777);
  // Returns "" when the case behaved, else what went wrong.
  auto user_case = [](const std::string& base) -> std::string {
    const std::string t = base + "/ro_tree", sub = t + "/sub";
    if (::mkdir(t.c_str(), 0755) != 0 || ::mkdir(sub.c_str(), 0755) != 0) return "cannot build the tree";
    { std::ofstream(sub + "/locked") << "x"; }
    { std::ofstream(t + "/free") << "x"; }
    ::chmod(sub.c_str(), 0555);
    std::error_code ec;
    std::string failed;
    const bool ok = remove_tree(t, ec, &failed);
    std::string why;
    if (ok) why = "removed a read-only folder's file";
    else if (ec.value() != EACCES) why = "error " + ec.message();
    else if (failed != sub + "/locked") why = "named " + failed;
    else if (!lexists(sub + "/locked")) why = "the locked file is gone";
    ::chmod(sub.c_str(), 0755);
    if (why.empty() && !remove_tree(t, ec)) why = "writable again, still not removed: " + ec.message();
    return why;
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(user_case(root), "");
    return;
  }
  // Root: the same tree goes whole.
  {
    const std::string t = root + "/root_tree", sub = t + "/sub";
    fs::create_directories(sub);
    write_bytes(sub + "/locked", 1);
    ::chmod(sub.c_str(), 0555);
    std::error_code ec;
    EXPECT_TRUE(remove_tree(t, ec)) << ec.message();
    EXPECT_FALSE(lexists(t));
  }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(77);
    const std::string why = user_case(root);
    if (!why.empty() && ::write(fds[1], why.data(), why.size()) < 0) ::_exit(2);
    ::_exit(why.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string why;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) why.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77)
    GTEST_SKIP() << "running as root without the right to switch to user 65534: the non-root case cannot run here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << why;
}

// The cause of the exit-time crashes under pip's LibTorch 2.x cannot come back unseen: no source
// of core/, app/, views/, kernels/ or tests/ calls std::filesystem's recursive walks.
TEST(FileTree, SourcesUseNoLibstdcxxTreeWalks) {
  const std::string src = test::source_dir();
  const std::string self = src + "/tests/test_file_tree.cpp";
  const std::vector<std::string> banned = {"remove_all(", "recursive_directory_iterator"};
  const std::set<std::string> exts = {".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".inl", ".mm"};
  std::vector<std::string> offenders;
  size_t scanned = 0;
  bool saw_self = false, saw_home = false;
  for (const char* area : {"core", "app", "views", "kernels", "tests"}) {
    walk_files(src + "/" + area, [&](const TreeFile& f) {
      if (!exts.count(fs::path(f.path).extension().string())) return;
      if (f.path == self) {
        saw_self = true;
        return;
      }
      saw_home |= f.path == src + "/core/src/base/file_tree.cpp";
      ++scanned;
      std::istringstream lines(test::read_file(f.path));
      std::string line;
      for (int n = 1; std::getline(lines, line); ++n)
        for (const std::string& b : banned)
          if (line.find(b) != std::string::npos) offenders.push_back(f.path + ":" + std::to_string(n) + ": " + b);
    });
  }
  EXPECT_TRUE(saw_self && saw_home) << "the walk did not reach the sources it must check";
  EXPECT_GT(scanned, 100u);
  std::string list;
  for (const std::string& o : offenders) list += "\n  " + o;
  EXPECT_TRUE(offenders.empty()) << "std::filesystem's recursive walks are used (pip's LibTorch exports its own "
                                    "copies, pytorch issue 133437); use remove_tree / walk_files of "
                                    "attnscope/base/file_tree.h:"
                                 << list;
}

}  // namespace test_file_tree
