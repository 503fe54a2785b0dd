// metrics.jsonl of a run directory (run_metrics.h).
#include "attnscope/distill/run_metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace attnscope {

int RunMetrics::num_layers() const {
  int n = 0;
  for (const auto& p : training) n = std::max(n, p.layer + 1);
  for (const auto& p : validation) n = std::max(n, p.layer + 1);
  return n;
}

int64_t RunMetrics::last_step() const {
  int64_t s = 0;
  for (const auto& p : training) s = std::max(s, p.step);
  return s;
}

namespace {

bool is_number(const nlohmann::json& j, const char* key) { return j.contains(key) && j[key].is_number(); }

void parse_line(const std::string& line, RunMetrics& into) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !is_number(j, "step")) return;
  const int64_t step = j["step"].get<int64_t>();
  const int layer = is_number(j, "layer") ? j["layer"].get<int>() : kModelLayer;
  if (layer < kModelLayer) return;
  if (is_number(j, "loss")) {
    TrainingPoint p;
    p.step = step;
    p.layer = layer;
    p.loss = j["loss"].get<double>();
    if (is_number(j, "lr")) p.lr = j["lr"].get<double>();
    if (is_number(j, "elapsed_s")) p.elapsed_s = j["elapsed_s"].get<double>();
    into.training.push_back(p);
  }
  if (is_number(j, "val_kl")) {
    ValidationPoint p;
    p.step = step;
    p.layer = layer;
    p.val_kl = j["val_kl"].get<double>();
    if (is_number(j, "val_loss")) p.val_loss = j["val_loss"].get<double>();
    into.validation.push_back(p);
  }
}

}  // namespace

void parse_metrics_lines(const std::string& text, RunMetrics& into) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // an unfinished line: the writer is still on it
    if (end > begin) parse_line(text.substr(begin, end - begin), into);
    begin = end + 1;
  }
}

RunMetrics read_run_metrics(const std::string& run_dir) {
  MetricsTail tail(run_dir);
  tail.poll();
  return tail.metrics();
}

MetricsTail::MetricsTail(std::string run_dir) : dir_(std::move(run_dir)) {}

void MetricsTail::reset() {
  metrics_ = RunMetrics{};
  offset_ = 0;
  inode_ = 0;
}

bool MetricsTail::poll() {
  const std::string path = dir_ + "/metrics.jsonl";
  struct stat st {};
  if (dir_.empty() || ::stat(path.c_str(), &st) != 0) {
    const bool had = offset_ > 0;
    reset();
    return had;
  }
  bool changed = false;
  if (uint64_t(st.st_ino) != inode_ || uint64_t(st.st_size) < offset_) {
    changed = offset_ > 0;
    reset();
    inode_ = uint64_t(st.st_ino);
  }
  if (uint64_t(st.st_size) == offset_) return changed;
  std::ifstream in(path, std::ios::binary);
  if (!in) return changed;
  in.seekg(std::streamoff(offset_));
  std::string text(size_t(uint64_t(st.st_size) - offset_), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  const size_t last = text.rfind('\n');
  if (last == std::string::npos) return changed;
  text.resize(last + 1);
  const size_t before = metrics_.training.size() + metrics_.validation.size();
  parse_metrics_lines(text, metrics_);
  offset_ += text.size();
  return changed || metrics_.training.size() + metrics_.validation.size() != before;
}

}  // namespace attnscope
