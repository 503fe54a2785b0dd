// Removing and listing a folder tree: the one home of attnscope's recursive file-system walks.
//
// Why not std::filesystem: pip's LibTorch 2.x (libtorch_cpu.so of the manylinux wheels) links
// parts of libstdc++'s std::filesystem statically and exports them from its dynamic symbol table
// (pytorch issue 133437: `nm -D libtorch_cpu.so` lists the recursive directory iterator's
// constructor, increment, pop, depth, ... as strong `T` symbols, both ABIs). In a process that
// loads that library, the system libstdc++'s remove-all and the recursive directory iterator bind
// partly to those copies, built against another libstdc++'s private layouts; on the one GPU run
// (LibTorch 2.11, pip) 194 of 363 test processes died with SIGSEGV at or near exit, where the
// tests' temporary folders and OutputDir are removed. Whether or not that is the cause there, these
// walks are written on POSIX calls (openat, fdopendir, fstatat, unlinkat) and use no std::filesystem
// directory iteration at all, so no such binding can reach them. A source-lint test
// (FileTree.SourcesUseNoLibstdcxxTreeWalks) keeps std::filesystem's remove-all and recursive
// iterator out of core/, app/, views/, kernels/ and tests/.
//
// The one-level std::filesystem::directory_iterator stays where it is used: issue 133437, its
// fixes (pytorch PRs 163980/164508) and pytorch's check_binary_symbols.py name only the recursive
// iterator's symbols; the workaround other projects took for the same breakage (DeepGEMM PR 131)
// was to replace the recursive iterator by the one-level one. If a run ever implicates the
// one-level iterator too, its users switch to walk_files or a one-level variant here.
//
// Both walks open every folder with O_NOFOLLOW|O_DIRECTORY relative to its parent's descriptor, so
// a symbolic link is never followed out of the tree, not even when a folder is swapped for a link
// while the walk runs: a link is removed itself (its target is untouched) and is not listed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <system_error>

namespace attnscope {

// Removes `path` and, when it is a folder, everything under it, depth first; like
// std::filesystem's remove-all, without following links:
//  - a missing path is nothing to do (success); so is an entry that vanishes while we remove it;
//  - a file or a symbolic link (to anything, dangling included) is unlinked, never its target;
//  - permissions are not changed: where the OS refuses (a read-only subfolder, even our own, whose
//    entries a non-root user may not unlink: EACCES naming the entry inside it; a read-only or busy
//    file system; out of file descriptors) it stops at that entry, leaves the rest, and reports
//    it. Root (DAC override) removes read-only folders as any other.
//  - it holds one descriptor per level of depth (the folder being emptied and its parents), as
//    libstdc++'s own walk does.
// The error_code form returns false on the first failure, sets `ec` to its errno and, when
// `failed` is given, the path (`path` + "/" + the entry's names) it failed on; it never throws.
bool remove_tree(const std::string& path, std::error_code& ec, std::string* failed = nullptr) noexcept;
// The throwing form: Error("<failed path>: cannot be removed: <reason>").
void remove_tree(const std::string& path);

struct TreeFile {
  std::string path;    // `dir` + "/" + the names below it
  uint64_t bytes = 0;  // st_size
};
using TreeFileVisitor = std::function<void(const TreeFile&)>;

// Calls `visit` for every regular file under the folder `dir` (its subfolders too, in directory
// order, not sorted). Symbolic links are neither listed nor followed; other non-regular entries
// (fifos, sockets, devices) are not listed. A missing `dir` lists nothing (success); a `dir` that
// is not a folder is a failure (ENOTDIR). A subfolder that cannot be opened or read is skipped and
// the walk goes on (as the permission-skipping directory iteration did); the first such failure is
// reported: false, `ec` and `failed` as in remove_tree. An exception thrown by `visit` propagates.
bool walk_files(const std::string& dir, const TreeFileVisitor& visit, std::error_code& ec,
                std::string* failed = nullptr);
// The throwing form: after the walk, Error("<failed path>: cannot be listed: <reason>").
void walk_files(const std::string& dir, const TreeFileVisitor& visit);

}  // namespace attnscope
