// A directory that appears whole or not at all. Everything is written into a temporary sibling
// (DIR.partial-PID); commit() exchanges it with DIR in one atomic rename (renameat2 EXCHANGE; where
// the file system cannot, two renames: the old DIR aside as DIR.old-PID, the new one in), then
// removes the old one, so at every moment one complete version exists. Destroyed without commit()
// (an error, a cancellation), it removes the sibling and leaves any earlier DIR untouched. A writer
// killed outright (SIGKILL) cannot clean up: the next OutputDir in the same folder removes the
// partial siblings of writers that no longer run, and puts a lone DIR.old-PID back as DIR.
// Captures, pretrained models, reports, and later jobs and converted models all write this way.
#pragma once
#include <string>
#include <vector>

namespace attnscope {

class OutputDir {
 public:
  // Throws Error naming `final_dir` when its parent does not exist or it exists as a file.
  explicit OutputDir(const std::string& final_dir);
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::string& path() const { return tmp_; }         // write here until commit()
  std::string file(const std::string& relative) const;      // path() + "/" + relative
  const std::string& final_path() const { return final_; }  // absolute
  void commit();

 private:
  std::string final_, tmp_;
  bool committed_ = false;
};

// What killed writers left beside `path` (its folder's X.partial-PID and lone X.old-PID of
// processes that are gone): the next OutputDir in that folder sweeps or restores them. For
// `attnscope info` and `jobs` to say so.
std::vector<std::string> killed_writer_debris(const std::string& path);
// Sweeps (and restores) them, as every OutputDir does at its start; a run directory's writer too.
void recover_killed_writers(const std::string& path);

}  // namespace attnscope
