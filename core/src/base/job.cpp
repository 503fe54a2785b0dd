#include "attnscope/base/job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {

namespace {

constexpr Named<JobKind> kJobKinds[] = {
    {JobKind::Model, "model"},     {JobKind::Capture, "capture"}, {JobKind::Spectra, "spectra"},
    {JobKind::Metrics, "metrics"}, {JobKind::Maps, "maps"},       {JobKind::Report, "report"},
    {JobKind::Session, "session"}, {JobKind::Distill, "distill"}, {JobKind::Convert, "convert"},
    {JobKind::Eval, "eval"},       {JobKind::Finetune, "finetune"}, {JobKind::Linearize, "linearize"}};

}  // namespace

JobKind parse_job_kind(const std::string& name) { return parse_name(kJobKinds, name, "job kind"); }
const char* job_kind_name(JobKind kind) { return name_of(kJobKinds, kind); }
std::vector<std::string> job_kind_names() { return names_of(kJobKinds); }

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::Queued: return "queued";
    case JobState::Running: return "running";
    case JobState::Succeeded: return "done";
    case JobState::Failed: return "failed";
    case JobState::Cancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

// "[   1.2 s] what": the time since the work started, aligned so a log reads as a column.
std::string stamped(double seconds, const std::string& what) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "[%6.1f s] ", seconds);
  return buf + what;
}

bool is_finished(JobState s) {
  return s == JobState::Succeeded || s == JobState::Failed || s == JobState::Cancelled;
}

}  // namespace

Job::Job(int id, JobKind kind, std::string title, std::string command)
    : id_(id), kind_(kind), title_(std::move(title)), command_(std::move(command)) {}

double Job::elapsed_locked() const {
  if (state_ == JobState::Queued) return 0;
  const Clock::time_point until = is_finished(state_) ? end_ : Clock::now();
  return std::chrono::duration<double>(until - start_).count();
}

ProgressFn Job::progress() {
  return [this](double fraction, const std::string& what) {
    // Checked first: once cancel() returns, no further step is recorded or shown.
    if (cancel_.load()) throw Cancelled();
    ProgressFn observer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fraction != fraction_ || samples_.empty()) {
        const double now = elapsed_locked();
        samples_.push_back({now, fraction});
        // Two minutes of history is all the estimate reads (and the vector stays small).
        size_t old = 0;
        while (old + 2 < samples_.size() && samples_[old].seconds < now - 120) ++old;
        if (old > 64) samples_.erase(samples_.begin(), samples_.begin() + long(old));
      }
      fraction_ = fraction;
      if (what != step_) {
        step_ = what;
        log_.push_back(stamped(elapsed_locked(), what));
      }
      observer = observer_;
    }
    // Outside the lock: a terminal bar may be slow, and status() must not wait for it.
    if (observer) observer(fraction, what);
  };
}

void Job::log(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  log_.push_back(stamped(elapsed_locked(), line));
}

void Job::cancel() { cancel_.store(true); }

JobStatus Job::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  JobStatus s;
  s.id = id_;
  s.kind = kind_;
  s.title = title_;
  s.command = command_;
  s.state = state_;
  s.fraction = fraction_;
  s.step = step_;
  s.elapsed_s = elapsed_locked();
  s.error = error_;
  s.log = log_;
  if (state_ == JobState::Running && !samples_.empty()) {
    std::vector<ProgressSample> now = samples_;
    now.push_back({s.elapsed_s, fraction_});  // the time since the last report counts too
    s.seconds_left = estimate_seconds_left(now);
  }
  return s;
}

double estimate_seconds_left(const std::vector<ProgressSample>& samples, double window) {
  if (samples.size() < 2) return -1;
  const ProgressSample& last = samples.back();
  if (!(last.fraction < 1)) return -1;
  size_t first = 0;  // the oldest sample inside the window (the one before it if none is)
  while (first + 1 < samples.size() - 1 && samples[first + 1].seconds <= last.seconds - window) ++first;
  const double dt = last.seconds - samples[first].seconds, df = last.fraction - samples[first].fraction;
  if (dt < 3 || !(df > 0)) return -1;
  return (1 - last.fraction) * dt / df;
}

std::string time_left_text(double s) {
  if (!(s >= 0)) return "";
  char buf[48];
  if (s < 90) std::snprintf(buf, sizeof buf, "about %.0f s left", std::max(1.0, std::round(s / 5) * 5));
  else if (s < 90 * 60) std::snprintf(buf, sizeof buf, "about %.0f min left", std::round(s / 60));
  else std::snprintf(buf, sizeof buf, "about %.1f h left", s / 3600);
  return buf;
}

JobState Job::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void Job::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return is_finished(state_); });
}

void Job::rethrow() const {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e = failure_;
  }
  if (e) std::rethrow_exception(e);
}

void Job::run(const std::function<void(Job&)>& work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    start_ = Clock::now();
    state_ = JobState::Running;
  }
  JobState outcome = JobState::Succeeded;
  std::string message;
  std::exception_ptr failure;
  try {
    // A job cancelled before it started does not start: its work may not call progress early.
    if (cancel_.load()) throw Cancelled();
    work(*this);
  } catch (const Cancelled&) {
    outcome = JobState::Cancelled;
    failure = std::current_exception();
  } catch (const std::exception& e) {
    outcome = JobState::Failed;
    message = e.what();
    failure = std::current_exception();
  } catch (...) {
    outcome = JobState::Failed;
    message = "unknown error (not a std::exception)";
    failure = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_ = Clock::now();
    state_ = outcome;
    error_ = message;
    failure_ = failure;
    const double t = std::chrono::duration<double>(end_ - start_).count();
    if (outcome == JobState::Failed) log_.push_back(stamped(t, "failed: " + message));
    if (outcome == JobState::Cancelled) log_.push_back(stamped(t, "cancelled"));
    if (outcome == JobState::Succeeded) {
      fraction_ = 1;  // work that never reported its end still shows as complete
      log_.push_back(stamped(t, "done"));
    }
  }
  done_cv_.notify_all();
}

JobRunner::~JobRunner() {
  cancel_all();
  // Threads are only added under mu_ by start(); nobody may call start() while destroying.
  for (Worker& w : workers_)
    if (w.thread.joinable()) w.thread.join();
}

std::shared_ptr<Job> JobRunner::start(JobKind kind, const std::string& title, const std::string& command,
                                      Work work, Done done) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->exited->load()) {
      it->thread.join();  // has returned already: does not block
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  auto job = std::make_shared<Job>(next_id_++, kind, title, command);
  jobs_.push_back(job);
  auto exited = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([job, exited, work = std::move(work), done = std::move(done)] {
    job->run(work);
    // An exception escaping a thread would terminate the program: note it in the job's log.
    try {
      if (done) done(*job);
    } catch (const std::exception& e) {
      job->log(std::string("after the job: ") + e.what());
    } catch (...) {
      job->log("after the job: unknown error");
    }
    exited->store(true);
  });
  workers_.push_back({std::move(thread), std::move(exited)});
  return job;
}

std::vector<std::shared_ptr<Job>> JobRunner::jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_;
}

std::shared_ptr<Job> JobRunner::find(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& j : jobs_)
    if (j->id() == id) return j;
  return nullptr;
}

size_t JobRunner::thread_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

void JobRunner::cancel_all() {
  for (const auto& j : jobs()) j->cancel();
}

void JobRunner::wait_all() const {
  for (const auto& j : jobs()) j->wait();
}

void run_job(JobKind kind, const std::string& title, const std::string& command,
             const std::function<void(Job&)>& work, const ProgressFn& observer) {
  Job job(0, kind, title, command);  // id 0: not one of a runner's jobs
  job.observer_ = observer;
  job.run(work);
  job.rethrow();
}

}  // namespace attnscope
