// metrics.jsonl of a run directory (run_metrics.h).
#include "attnscope/run/run_metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
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

double final_validation_kl(const RunMetrics& metrics) {
  std::map<int, double> last;
  for (const ValidationPoint& v : metrics.validation) last[v.layer] = v.val_kl;
  if (last.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (const auto& [layer, kl] : last) sum += kl;
  return sum / double(last.size());
}

int64_t FinetuneMetrics::last_step() const {
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

void parse_line(const std::string& line, FinetuneMetrics& into) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !is_number(j, "step")) return;
  const int64_t step = j["step"].get<int64_t>();
  if (is_number(j, "loss") && is_number(j, "ce")) {
    FinetuneStep p;
    p.step = step;
    p.loss = j["loss"].get<double>();
    p.ce = j["ce"].get<double>();
    if (is_number(j, "lr")) p.lr = j["lr"].get<double>();
    if (is_number(j, "elapsed_s")) p.elapsed_s = j["elapsed_s"].get<double>();
    into.training.push_back(p);
  }
  if (is_number(j, "val_loss")) {
    FinetuneValidation p;
    p.step = step;
    p.val_loss = j["val_loss"].get<double>();
    p.val_perplexity = is_number(j, "val_perplexity") ? j["val_perplexity"].get<double>() : std::exp(p.val_loss);
    into.validation.push_back(p);
  }
}

template <class Metrics>
void parse_lines(const std::string& text, Metrics& into) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // an unfinished line: the writer is still on it
    if (end > begin) parse_line(text.substr(begin, end - begin), into);
    begin = end + 1;
  }
}

size_t count(const RunMetrics& m) { return m.training.size() + m.validation.size(); }
size_t count(const FinetuneMetrics& m) { return m.training.size() + m.validation.size(); }

}  // namespace

void parse_metrics_lines(const std::string& text, RunMetrics& into) { parse_lines(text, into); }
void parse_metrics_lines(const std::string& text, FinetuneMetrics& into) { parse_lines(text, into); }

RunMetrics read_run_metrics(const std::string& run_dir) {
  MetricsTail tail(run_dir);
  tail.poll();
  return tail.metrics();
}

FinetuneMetrics read_finetune_metrics(const std::string& run_dir) {
  FinetuneTail tail(run_dir);
  tail.poll();
  return tail.metrics();
}

template <class Metrics>
JsonlTail<Metrics>::JsonlTail(std::string run_dir) : dir_(std::move(run_dir)) {}

template <class Metrics>
void JsonlTail<Metrics>::reset() {
  metrics_ = Metrics{};
  offset_ = 0;
  inode_ = 0;
}

template <class Metrics>
bool JsonlTail<Metrics>::poll() {
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
  const size_t before = count(metrics_);
  parse_metrics_lines(text, metrics_);
  offset_ += text.size();
  return changed || count(metrics_) != before;
}

template class JsonlTail<RunMetrics>;
template class JsonlTail<FinetuneMetrics>;

}  // namespace attnscope
