// The job runner the CLI and the workbench share: states, progress and log, cancellation at the
// next progress call, failures kept with their message and rethrown as their own type, and a
// runner that cannot hang on destruction.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "attnscope/base/error.h"
#include "attnscope/base/job.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_job {

using namespace attnscope;
using namespace std::chrono_literals;

namespace {

// Work that reports `steps` steps, sleeping a little between them, so a test can cancel mid-way.
// `reached` counts the progress calls that returned.
JobRunner::Work stepping(int steps, std::atomic<int>* reached, std::chrono::milliseconds pause = 2ms) {
  return [=](Job& job) {
    const ProgressFn p = job.progress();
    for (int s = 0; s < steps; ++s) {
      p(double(s) / steps, "step " + std::to_string(s));
      if (reached) ++*reached;
      std::this_thread::sleep_for(pause);
    }
  };
}

// Polls until `pred` holds or 10 s pass (a hung test fails instead of blocking ctest).
template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST(Job, StateNames) {
  EXPECT_STREQ(job_state_name(JobState::Queued), "queued");
  EXPECT_STREQ(job_state_name(JobState::Running), "running");
  EXPECT_STREQ(job_state_name(JobState::Succeeded), "done");
  EXPECT_STREQ(job_state_name(JobState::Failed), "failed");
  EXPECT_STREQ(job_state_name(JobState::Cancelled), "cancelled");
}

TEST(Job, RunRecordsStatesProgressAndLog) {
  Job job(7, JobKind::Metrics, "metrics of 2 layers", "attnscope metrics");
  EXPECT_EQ(job.state(), JobState::Queued);
  EXPECT_FALSE(job.status().finished());
  EXPECT_EQ(job.status().elapsed_s, 0.0);

  JobStatus during;
  job.run([&](Job& j) {
    const ProgressFn p = j.progress();
    p(0.25, "layer 1/2");
    p(0.3, "layer 1/2");  // same step: the fraction moves, the log does not grow
    j.log("a note");
    p(0.5, "layer 2/2");
    std::this_thread::sleep_for(20ms);
    during = j.status();
  });
  EXPECT_EQ(during.state, JobState::Running);
  EXPECT_DOUBLE_EQ(during.fraction, 0.5);
  EXPECT_EQ(during.step, "layer 2/2");
  EXPECT_GE(during.elapsed_s, 0.019);

  const JobStatus s = job.status();
  EXPECT_EQ(s.id, 7);
  EXPECT_EQ(s.kind, JobKind::Metrics);
  EXPECT_EQ(s.title, "metrics of 2 layers");
  EXPECT_EQ(s.command, "attnscope metrics");
  EXPECT_EQ(s.state, JobState::Succeeded);
  EXPECT_TRUE(s.finished());
  EXPECT_TRUE(s.error.empty());
  EXPECT_DOUBLE_EQ(s.fraction, 1.0);
  ASSERT_EQ(s.log.size(), 4u);
  EXPECT_EQ(s.log[0], "[   0.0 s] layer 1/2");
  EXPECT_EQ(s.log[1], "[   0.0 s] a note");
  EXPECT_EQ(s.log[2], "[   0.0 s] layer 2/2");
  EXPECT_NE(s.log[3].find("done"), std::string::npos) << s.log[3];
  // Elapsed time freezes once the job has ended.
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(job.status().elapsed_s, s.elapsed_s);
  EXPECT_NO_THROW(job.rethrow());
}

// Issue 26: every long job shows an estimate of the time left, from the rate of its last minute
// (a job whose phases run at different rates is estimated by the phase it is in). Closed forms.
TEST(Job, TimeLeftIsTheLastMinutesRate) {
  std::vector<ProgressSample> steady;
  for (int t = 0; t <= 10; ++t) steady.push_back({double(t), t / 100.0});
  EXPECT_NEAR(estimate_seconds_left(steady), 90, 1e-9);  // 0.01 per second, 0.9 to go
  // A fast phase (half in 10 s), then a slow one (0.001 per second for 100 s): the last 60 s say 400 s.
  std::vector<ProgressSample> phases = {{0, 0}, {10, 0.5}};
  for (int t = 20; t <= 110; t += 10) phases.push_back({double(t), 0.5 + (t - 10) * 0.001});
  EXPECT_NEAR(estimate_seconds_left(phases), (1 - 0.6) / 0.001, 1e-6);
  EXPECT_NEAR(estimate_seconds_left(phases, 1000), (1 - 0.6) * 110 / 0.6, 1e-6);  // the whole run's rate
  // Unknown: too early, nothing advanced in the window, done, one sample.
  EXPECT_EQ(estimate_seconds_left({{0, 0}, {2, 0.5}}), -1);
  EXPECT_EQ(estimate_seconds_left({{0, 0.2}, {100, 0.3}, {170, 0.3}}), -1);
  EXPECT_EQ(estimate_seconds_left({{0, 0}, {10, 1}}), -1);
  EXPECT_EQ(estimate_seconds_left({{5, 0.5}}), -1);
  EXPECT_EQ(time_left_text(42), "about 40 s left");
  EXPECT_EQ(time_left_text(200), "about 3 min left");
  EXPECT_EQ(time_left_text(7200), "about 2.0 h left");
  EXPECT_EQ(time_left_text(-1), "");
  // A job reports none before it has run long enough to say.
  Job job(1, JobKind::Capture, "t", "c");
  job.run([](Job& j) {
    j.progress()(0.1, "a");
    EXPECT_EQ(j.status().seconds_left, -1);
  });
}

TEST(Job, FailureKeepsTheMessageAndRethrowsTheSameType) {
  Job job(1, JobKind::Capture, "t", "c");
  job.run([](Job& j) {
    j.progress()(0.1, "loading");
    fail_value("budget", "0 must be positive");
  });
  const JobStatus s = job.status();
  EXPECT_EQ(s.state, JobState::Failed);
  EXPECT_EQ(s.error, "budget 0 must be positive");
  ASSERT_FALSE(s.log.empty());
  EXPECT_NE(s.log.back().find("budget 0 must be positive"), std::string::npos) << s.log.back();
  try {
    job.rethrow();
    ADD_FAILURE() << "expected the Error again";
  } catch (const Cancelled&) {
    ADD_FAILURE() << "a failure is not a cancellation";
  } catch (const Error& e) {
    EXPECT_EQ(e.quantity(), "budget");  // the very exception, not a copy with the message only
    EXPECT_STREQ(e.what(), "budget 0 must be positive");
  }

  // Not an attnscope::Error: still Failed, with its own message and type.
  Job other(2, JobKind::Eval, "t", "c");
  other.run([](Job&) { throw std::out_of_range("index 9"); });
  EXPECT_EQ(other.state(), JobState::Failed);
  EXPECT_EQ(other.status().error, "index 9");
  EXPECT_THROW(other.rethrow(), std::out_of_range);
}

TEST(Job, CancelStopsAtTheNextProgressCall) {
  JobRunner runner;
  std::atomic<int> reached{0};
  auto job = runner.start(JobKind::Spectra, "t", "c", stepping(100000, &reached));
  ASSERT_TRUE(eventually([&] { return reached.load() >= 3; }));
  EXPECT_EQ(job->state(), JobState::Running);
  job->cancel();
  EXPECT_TRUE(job->cancel_requested());
  const int at_cancel = reached.load();
  job->wait();
  EXPECT_EQ(job->state(), JobState::Cancelled);
  // At most the step that was running when cancel() came finishes; the next progress call throws.
  EXPECT_LE(reached.load(), at_cancel + 1);
  EXPECT_LT(reached.load(), 100000);
  EXPECT_THROW(job->rethrow(), Cancelled);
  const JobStatus s = job->status();
  EXPECT_TRUE(s.error.empty()) << "a cancellation is not an error";
  EXPECT_NE(s.log.back().find("cancelled"), std::string::npos);
  EXPECT_LT(s.fraction, 1.0);
}

TEST(Job, RunnerNumbersJobsWaitsAndCallsDone) {
  JobRunner runner;
  std::atomic<int> done_calls{0};
  std::atomic<int> done_seen_finished{0};
  auto done = [&](Job& j) {
    if (j.status().finished()) ++done_seen_finished;
    ++done_calls;
  };
  auto a = runner.start(JobKind::Capture, "a", "ca", stepping(5, nullptr), done);
  auto b = runner.start(JobKind::Report, "b", "cb", [](Job&) { throw Error("b.txt: empty text"); }, done);
  auto c = runner.start(JobKind::Metrics, "c", "cc", stepping(3, nullptr));
  EXPECT_EQ(a->id(), 1);
  EXPECT_EQ(b->id(), 2);
  EXPECT_EQ(c->id(), 3);
  runner.wait_all();
  for (const auto& j : runner.jobs()) EXPECT_TRUE(j->status().finished()) << j->id();
  EXPECT_EQ(a->state(), JobState::Succeeded);
  EXPECT_EQ(b->state(), JobState::Failed);
  EXPECT_EQ(b->status().error, "b.txt: empty text");
  EXPECT_EQ(c->state(), JobState::Succeeded);
  const auto all = runner.jobs();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], a);
  EXPECT_EQ(all[2], c);
  EXPECT_EQ(runner.find(2), b);
  EXPECT_EQ(runner.find(4), nullptr);
  // done runs after the job finished, on the worker thread, possibly just after wait_all returned.
  EXPECT_TRUE(eventually([&] { return done_calls.load() == 2; }));
  EXPECT_EQ(done_seen_finished.load(), 2);
}

TEST(Job, DestroyingTheRunnerCancelsRunningJobs) {
  std::shared_ptr<Job> job;
  std::atomic<int> reached{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    JobRunner runner;
    // Would run for ~100 s if nobody cancelled it.
    job = runner.start(JobKind::Report, "t", "c", stepping(50000, &reached));
    ASSERT_TRUE(eventually([&] { return reached.load() >= 1; }));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(job->state(), JobState::Cancelled);
}

TEST(Job, CancelAllStopsEveryJob) {
  JobRunner runner;
  std::atomic<int> r1{0}, r2{0};
  auto a = runner.start(JobKind::Eval, "a", "c", stepping(50000, &r1));
  auto b = runner.start(JobKind::Eval, "b", "c", stepping(50000, &r2));
  ASSERT_TRUE(eventually([&] { return r1.load() >= 1 && r2.load() >= 1; }));
  runner.cancel_all();
  runner.wait_all();
  EXPECT_EQ(a->state(), JobState::Cancelled);
  EXPECT_EQ(b->state(), JobState::Cancelled);
}

TEST(Job, CancelledBeforeItStartsNeverRunsTheWork) {
  Job job(1, JobKind::Eval, "t", "c");
  job.cancel();
  bool ran = false;
  job.run([&](Job&) { ran = true; });
  EXPECT_FALSE(ran);
  EXPECT_EQ(job.state(), JobState::Cancelled);
  EXPECT_THROW(job.rethrow(), Cancelled);
}

TEST(Job, RunJobForwardsProgressAndRethrows) {
  std::vector<std::pair<double, std::string>> seen;
  auto observer = [&](double f, const std::string& what) { seen.emplace_back(f, what); };
  run_job(JobKind::Capture, "t", "c",
          [](Job& j) {
            const ProgressFn p = j.progress();
            p(0.5, "windows 1/2");
            p(1.0, "windows 2/2");
          },
          observer);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0].first, 0.5);
  EXPECT_EQ(seen[0].second, "windows 1/2");
  EXPECT_EQ(seen[1].second, "windows 2/2");

  // Without an observer progress still works; errors come back as their own type.
  try {
    run_job(JobKind::Report, "t", "c", [](Job& j) {
      j.progress()(0.1, "x");
      fail_value("lambda", "must be > 0");
    });
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.quantity(), "lambda");
  }
  // An observer that cancels (a terminal's Ctrl-C handler would) stops the work as Cancelled.
  int steps = 0;
  EXPECT_THROW(run_job(JobKind::Report, "t", "c",
                       [&](Job& j) {
                         for (int s = 0; s < 10; ++s, ++steps) j.progress()(s / 10.0, "s" + std::to_string(s));
                       },
                       [](double f, const std::string&) {
                         if (f >= 0.3) throw Cancelled();
                       }),
               Cancelled);
  EXPECT_EQ(steps, 3);
}

// A session starts a job per head click: finished jobs stay listed, but their threads must go.
TEST(Job, FinishedThreadsAreJoinedByTheNextStart) {
  JobRunner runner;
  for (int i = 0; i < 40; ++i) {
    auto job = runner.start(JobKind::Maps, "head " + std::to_string(i), "", [](Job&) {});
    job->wait();
  }
  // Every earlier job has returned; the thread may still be finishing its last lines, so give it a moment.
  ASSERT_TRUE(eventually([&] {
    auto probe = runner.start(JobKind::Maps, "probe", "", [](Job&) {});
    probe->wait();
    return runner.thread_count() <= 2;
  }));
  EXPECT_GE(runner.jobs().size(), 41u);  // the history is kept
  std::atomic<int> reached{0};
  auto slow = runner.start(JobKind::Capture, "slow", "", stepping(1000, &reached, 1ms));
  ASSERT_TRUE(eventually([&] { return reached.load() > 0; }));
  runner.start(JobKind::Maps, "one more", "", [](Job&) {})->wait();
  EXPECT_GE(runner.thread_count(), 1u);  // the running job's thread is never joined early
  EXPECT_EQ(slow->state(), JobState::Running);
  slow->cancel();
  slow->wait();
  EXPECT_EQ(slow->state(), JobState::Cancelled);
}

// Issue 18, defect 3: job kinds are one name table, the words of the job lists.
TEST(JobKinds, EveryKindRoundTripsThroughItsName) {
  EXPECT_EQ(job_kind_names(), (std::vector<std::string>{"model", "capture", "spectra", "metrics", "maps", "report",
                                                        "session", "distill", "convert", "eval", "finetune", "linearize"}));
  for (const std::string& n : job_kind_names()) EXPECT_EQ(job_kind_name(parse_job_kind(n)), n);
  EXPECT_THROW(parse_job_kind("train"), Error);
}

}  // namespace test_job
