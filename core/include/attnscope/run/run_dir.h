// A job's run directory (SPEC 6), the files a training job leaves for people and for --resume:
//
//   RUN/job.json          the resolved config, written first
//   RUN/metrics.jsonl     one JSON object per line, appended and flushed after every step
//   RUN/log.txt           time-stamped lines a person reads afterwards
//   RUN/checkpoints/      checkpoint.safetensors: the latest complete checkpoint (written to
//                         checkpoint.safetensors.tmp and renamed, so a kill leaves the previous one)
//   RUN/report.json       written last, on success
//   RUN/running           the pid of the process running the job, locked (flock) by it while it
//                         runs: a second process cannot open the run for writing; absent once it
//                         has stopped (left, unlocked, by a killed one)
//
// Only the file layout lives here; what goes into the files is the job's business (distill.h).
#pragma once
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "attnscope/io/safetensors.h"

namespace attnscope {

class RunDir {
 public:
  // Opens RUN, creating it (and checkpoints/) when `create` (it must be absent or empty); else it
  // must exist with a job.json. A writing RunDir locks RUN/running for its lifetime: a second one
  // (another process, or a resume of a run that still trains) is refused. It sweeps a checkpoint a
  // killed writer left half-written. Throws Error naming the directory. With `writes` false the run directory is only read: nothing
  // is created and every write below does nothing (the other ranks of a distributed job, whose
  // results rank 0 writes).
  RunDir(const std::string& dir, bool create, bool writes = true);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& dir() const { return dir_; }
  std::string file(const std::string& relative) const { return dir_ + "/" + relative; }
  std::string checkpoint_path() const { return file("checkpoints/checkpoint.safetensors"); }
  bool has_checkpoint() const;
  bool writes() const { return writes_; }  // false on ranks other than 0

  void write_job(const std::string& json_text);  // atomic
  std::string read_job() const;                  // Error naming job.json when missing
  void append_metric(const std::string& json_line);  // one line, flushed
  void append_metrics(const std::vector<std::string>& json_lines);  // several, one flush
  // Keeps only the metric lines whose "step" is <= step (resuming from a checkpoint drops the
  // lines a killed run wrote after it, so the file reads as one uninterrupted run).
  void truncate_metrics_after(int64_t step);
  void log(const std::string& line);  // "[  12.3 s] line", flushed
  // Atomic: tensors and metadata go to a temporary file that is renamed over the checkpoint.
  void write_checkpoint(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata);
  void write_report(const std::string& json_text);  // atomic

  // RUN/running: this process's pid while the job runs (locked since the constructor), removed
  // when it ends in any way but a kill, so `attnscope jobs` tells running (locked) from killed.
  void mark_running();
  void clear_running();

 private:
  std::string dir_;
  std::mutex mu_;
  std::ofstream metrics_, log_;
  double start_s_ = 0;
  bool marked_ = false;
  bool writes_ = true;
  int lock_fd_ = -1;
  void lock();
};

}  // namespace attnscope

namespace attnscope {
// Where a run directory stands, one name table (the words of `attnscope jobs` and the window):
//   running   a process holds RUN/running's lock
//   finished  report.json is there
//   killed    it stopped without a report (cancelled, killed, failed): --resume continues it from
//             its last checkpoint
//   failed    it has no job.json: it stopped before it began
enum class RunState { Running, Finished, Killed, Failed };
RunState parse_run_state(const std::string& name);  // one of run_state_names(); else Error (quantity "run state")
const char* run_state_name(RunState state);
std::vector<std::string> run_state_names();  // running, finished, killed, failed
RunState run_state(const std::string& dir);
// True while a process holds RUN/running's lock.
bool run_is_live(const std::string& dir);
}  // namespace attnscope
