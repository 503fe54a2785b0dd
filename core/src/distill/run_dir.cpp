// The run directory of a job (run_dir.h): the files of SPEC 6 and how each is written.
#include "attnscope/distill/run_dir.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sstream>
#include <unistd.h>

#include "attnscope/base/error.h"
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
    fs::create_directories(fs::path(dir_) / "checkpoints", ec);
    if (ec) fail(dir_, "cannot create the run directory: " + ec.message());
  } else if (!fs::is_regular_file(fs::path(dir_) / "job.json")) {
    fail(dir_, "is not a run directory (no job.json)");
  }
  fs::create_directories(fs::path(dir_) / "checkpoints", ec);
  metrics_.open(file("metrics.jsonl"), std::ios::app);
  log_.open(file("log.txt"), std::ios::app);
  if (!metrics_ || !log_) fail(dir_, "cannot open metrics.jsonl / log.txt for appending");
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
  if (!writes_) return;
  write_text_file(file("running"), std::to_string(::getpid()) + "\n");
  marked_ = true;
}

void RunDir::clear_running() {
  if (!marked_) return;
  std::error_code ec;
  fs::remove(file("running"), ec);
  marked_ = false;
}

std::string run_state(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "report.json")) return "finished";
  std::ifstream in(fs::path(dir) / "running");
  long pid = 0;
  if (in >> pid && pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) return "running";
  return "killed";
}

void RunDir::write_report(const std::string& json_text) {
  if (writes_) write_text_file(file("report.json"), json_text);
}

}  // namespace attnscope
