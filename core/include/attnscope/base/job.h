// Background work that the CLI and the workbench share (SPEC 6): capture, spectra, metrics and
// report today, distillation and conversion later. A Job is one piece of work with its progress,
// elapsed time, log and outcome; a JobRunner runs jobs on worker threads. The workbench lists the
// runner's jobs and polls their status; the CLI runs the same work in the foreground with
// run_job() and a terminal progress bar. Either way the work is a function of a Job&, handing
// job.progress() to core, so cancelling means core's own Cancelled at the next step.
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "attnscope/base/progress.h"

namespace attnscope {

// What a job does, one name table: the words of the job lists (the window's Jobs tab, its log
// titles). The CLI's foreground jobs are capture, report and distill; the window adds the rest.
enum class JobKind { Model, Capture, Spectra, Metrics, Maps, Report, Session, Distill, Convert, Eval, Finetune, Linearize };
JobKind parse_job_kind(const std::string& name);  // one of job_kind_names(); else Error (quantity "job kind")
const char* job_kind_name(JobKind kind);
std::vector<std::string> job_kind_names();  // model, capture, spectra, metrics, maps, report, session, distill, convert, eval

enum class JobState { Queued, Running, Succeeded, Failed, Cancelled };
const char* job_state_name(JobState s);  // "queued", "running", "done", "failed", "cancelled"

// A consistent snapshot of a job, safe to read on any thread.
struct JobStatus {
  int id = 0;
  JobKind kind = JobKind::Capture;
  std::string title;    // what a person reads in the job list ("capture 8 x 256 tokens")
  std::string command;  // the attnscope command line that does the same work headless
  JobState state = JobState::Queued;
  double fraction = 0;       // 0..1
  std::string step;          // the step running ("layer 3/12")
  double elapsed_s = 0;      // since the work started; frozen once it ends
  std::string error;         // when Failed: the message
  std::vector<std::string> log;  // "[  1.2 s] layer 3/12", oldest first
  double seconds_left = -1;  // while running: the estimate (estimate_seconds_left); -1 unknown
  bool finished() const { return state == JobState::Succeeded || state == JobState::Failed || state == JobState::Cancelled; }
};

// A job's progress at a moment: seconds since it started, fraction done.
struct ProgressSample {
  double seconds = 0, fraction = 0;
};
// The time left at the rate of the last `window` seconds of `samples` (oldest first; the last is
// now): (1 - f) x dt / df over that stretch, so a job whose phases run at different rates is
// estimated by the phase it is in. -1 (unknown) before 3 s of samples, when nothing advanced in
// the window, or once done.
double estimate_seconds_left(const std::vector<ProgressSample>& samples, double window = 60);
// "about 40 s left", "about 3 min left", "about 1.5 h left"; "" for an unknown (negative) estimate.
std::string time_left_text(double seconds_left);

class Job {
 public:
  Job(int id, JobKind kind, std::string title, std::string command);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int id() const { return id_; }

  // For the work: a ProgressFn to hand to core. Records the fraction and step, logs every new step,
  // and throws Cancelled once cancel() has been called.
  ProgressFn progress();
  void log(const std::string& line);  // a time-stamped line in the job's log

  void cancel();                  // any thread: the work stops at its next progress call
  bool cancel_requested() const { return cancel_.load(); }

  JobStatus status() const;
  JobState state() const;
  void wait() const;   // until the job has finished (Succeeded, Failed or Cancelled)
  // After wait(): rethrows what ended the work (the Error of a failure, Cancelled); nothing on success.
  void rethrow() const;

  // Runs `work` on the calling thread, recording its outcome (never throws).
  void run(const std::function<void(Job&)>& work);

 private:
  using Clock = std::chrono::steady_clock;
  double elapsed_locked() const;

  const int id_;
  const JobKind kind_;
  const std::string title_, command_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;
  JobState state_ = JobState::Queued;
  double fraction_ = 0;
  std::string step_, error_;
  std::vector<std::string> log_;
  std::vector<ProgressSample> samples_;  // the recent progress (estimate_seconds_left's input)
  Clock::time_point start_{}, end_{};
  std::exception_ptr failure_;
  ProgressFn observer_;  // set by run_job before the work starts: the CLI's terminal bar

  friend void run_job(JobKind, const std::string&, const std::string&,
                      const std::function<void(Job&)>&, const ProgressFn&);
};

// Runs jobs on worker threads, one thread per job, in the order they were started. Destroying the
// runner cancels every unfinished job and waits for it. jobs() keeps every job started (the job
// list's history); only the threads of finished ones go.
class JobRunner {
 public:
  using Work = std::function<void(Job&)>;
  using Done = std::function<void(Job&)>;  // on the worker thread, after the job has finished

  JobRunner() = default;
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  std::shared_ptr<Job> start(JobKind kind, const std::string& title, const std::string& command,
                             Work work, Done done = nullptr);
  std::vector<std::shared_ptr<Job>> jobs() const;  // every job started, oldest first
  std::shared_ptr<Job> find(int id) const;         // null when unknown
  void cancel_all();
  void wait_all() const;
  size_t thread_count() const;  // worker threads not joined yet (running, or exited since the last start)

 private:
  mutable std::mutex mu_;
  int next_id_ = 1;
  std::vector<std::shared_ptr<Job>> jobs_;
  // A thread is joined by the first start() after it has exited, so a long session (a job per head
  // click) does not pile up finished threads; the destructor joins the rest.
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> exited;
  };
  std::vector<Worker> workers_;
};

// The CLI's way: runs `work` as a job on this thread, forwarding its progress to `observer` (a
// terminal bar; may be null), and rethrows whatever ended it.
void run_job(JobKind kind, const std::string& title, const std::string& command,
             const std::function<void(Job&)>& work, const ProgressFn& observer = nullptr);

}  // namespace attnscope
