// The run directory of a job (run_dir.h): the files of SPEC 6 and how each is written.
#include "attnscope/run/run_dir.h"

#include "attnscope/base/names.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sstream>
#include <unistd.h>

#include "attnscope/base/error.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/text_file.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

RunDir::RunDir(const std::string& dir, bool create, bool writes) : dir_(dir), start_s_(now_s()), writes_(writes) {
  std::error_code ec;
  if (!writes_) {
    if (!create && !fs::is_regular_file(fs::path(dir_) / "job.json")) fail(dir_, "is not a run directory (no job.json)");
    return;
  }
  if (create) {
    recover_killed_writers(dir_);  // a writer in this folder sweeps what killed ones left
    if (fs::exists(dir_) && !fs::is_directory(dir_)) fail(dir_, "exists and is not a directory");
    if (fs::is_directory(dir_) && !fs::is_empty(dir_, ec))
      fail(dir_, "is not empty: a new run needs a new (or empty) run directory; resume the run that is there, or "
                 "choose another");
    fs::create_directories(fs::path(dir_) / "checkpoints", ec);
    if (ec) fail(dir_, "cannot create the run directory: " + ec.message());
  } else if (!fs::is_regular_file(fs::path(dir_) / "job.json")) {
    fail(dir_, "is not a run directory (no job.json)");
  }
  lock();
  if (create) {
    // Another process may have created the same new run between the check above and the lock.
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename() != "running" && e.path().filename() != "checkpoints") {
        clear_running();
        fail(dir_, "is not empty: another process started a run here");
      }
  }
  // What a killed writer left: a checkpoint cut short before its rename.
  fs::remove(checkpoint_path() + ".tmp", ec);
  fs::create_directories(fs::path(dir_) / "checkpoints", ec);
  metrics_.open(file("metrics.jsonl"), std::ios::app);
  log_.open(file("log.txt"), std::ios::app);
  if (!metrics_ || !log_) fail(dir_, "cannot open metrics.jsonl / log.txt for appending");
}

void RunDir::lock() {
  lock_fd_ = ::open(file("running").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail(file("running"), std::string("cannot be opened: ") + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string pid;
    char buf[32] = {0};
    if (::pread(lock_fd_, buf, sizeof buf - 1, 0) > 0) pid = std::string(buf).substr(0, std::string(buf).find('\n'));
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail(dir_, "is in use: another process (pid " + (pid.empty() ? std::string("?") : pid) + ") is training this run");
  }
  marked_ = true;
}

bool RunDir::has_checkpoint() const { return fs::is_regular_file(checkpoint_path()); }

void RunDir::write_job(const std::string& json_text) {
  if (writes_) write_text_file(file("job.json"), json_text);
}

std::string RunDir::read_job() const {
  if (!fs::is_regular_file(file("job.json"))) fail(file("job.json"), "missing");
  return read_all(file("job.json"));
}

void RunDir::append_metric(const std::string& json_line) { append_metrics({json_line}); }

void RunDir::append_metrics(const std::vector<std::string>& json_lines) {
  if (!writes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& l : json_lines) metrics_ << l << '\n';
  metrics_.flush();
  if (!metrics_) fail(file("metrics.jsonl"), "write failed");
}

void RunDir::truncate_metrics_after(int64_t step) {
  if (!writes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.close();
  std::istringstream in(read_all(file("metrics.jsonl")));
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // A line cut short by the kill does not parse: it goes too.
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("step") || j["step"].get<int64_t>() > step) continue;
    kept += line + '\n';
  }
  write_text_file(file("metrics.jsonl"), kept);
  metrics_.open(file("metrics.jsonl"), std::ios::app);
}

void RunDir::log(const std::string& line) {
  if (!writes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "[%7.1f s] ", now_s() - start_s_);
  log_ << stamp << line << '\n';
  log_.flush();
}

void RunDir::write_checkpoint(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  // write_safetensors writes PATH.tmp and renames it over PATH: the old checkpoint stays whole
  // until the new one is.
  if (writes_) write_safetensors(checkpoint_path(), tensors, metadata);
}

RunDir::~RunDir() { clear_running(); }

void RunDir::mark_running() {
  if (lock_fd_ < 0) return;
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    fail(file("running"), "cannot be written");
}

void RunDir::clear_running() {
  if (!marked_) return;
  std::error_code ec;
  fs::remove(file("running"), ec);  // still locked by us: nobody else uses it now
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  marked_ = false;
}

bool run_is_live(const std::string& dir) {
  const int fd = ::open((fs::path(dir) / "running").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

namespace {
constexpr Named<RunState> kRunStates[] = {{RunState::Running, "running"},
                                          {RunState::Finished, "finished"},
                                          {RunState::Killed, "killed"},
                                          {RunState::Failed, "failed"}};
}  // namespace

RunState parse_run_state(const std::string& name) { return parse_name(kRunStates, name, "run state"); }
const char* run_state_name(RunState state) { return name_of(kRunStates, state); }
std::vector<std::string> run_state_names() { return names_of(kRunStates); }

RunState run_state(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "report.json")) return RunState::Finished;
  if (run_is_live(dir)) return RunState::Running;
  return fs::exists(fs::path(dir) / "job.json") ? RunState::Killed : RunState::Failed;
}

void RunDir::write_report(const std::string& json_text) {
  if (writes_) write_text_file(file("report.json"), json_text);
}

}  // namespace attnscope
