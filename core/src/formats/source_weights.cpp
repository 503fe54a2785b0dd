#include "attnscope/formats/source_weights.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "formats/sha256.h"

namespace fs = std::filesystem;

namespace attnscope::convert {

namespace {

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// stat(2), as Python's os.stat reports it (st_size, st_mtime_ns), so attnscope_linear.py compares
// the same numbers. Follows symbolic links (the Hugging Face cache's snapshots are links to blobs).
FileStat stat_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, "cannot be read (moved or deleted?)");
  return {uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec)};
}

std::vector<std::string> full_paths(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.second);
  return out;
}

// The files whose size or modification time differ from `record` (attnscope.source.files): all of
// them when there is no record or it lists other files.
std::vector<std::string> changed_files(const nlohmann::json& record,
                                       const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> recorded, present;
  if (record.is_array())
    for (const auto& r : record)
      if (r.is_object() && r.contains("name") && r["name"].is_string()) recorded.push_back(r["name"]);
  for (const auto& f : files) present.push_back(f.first);
  std::sort(recorded.begin(), recorded.end());
  std::sort(present.begin(), present.end());
  if (!record.is_array() || record.size() != files.size() || recorded != present) return full_paths(files);
  std::vector<std::string> changed;
  for (const auto& [name, full] : files) {
    const FileStat now = stat_file(full);
    const auto r = std::find_if(record.begin(), record.end(), [&](const nlohmann::json& e) { return e.at("name") == name; });
    const bool same = r->contains("size") && (*r)["size"].is_number_unsigned() && (*r)["size"].get<uint64_t>() == now.size &&
                      r->contains("mtime_ns") && (*r)["mtime_ns"].is_number_integer() &&
                      (*r)["mtime_ns"].get<int64_t>() == now.mtime_ns;
    if (!same) changed.push_back(full);
  }
  return changed;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> source_weight_files(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  if (fs::is_regular_file(p)) return {{p.filename().string(), p.string()}};
  if (fs::exists(p / "model.safetensors")) return {{"model.safetensors", (p / "model.safetensors").string()}};
  // The index's own reader lists the shards (WeightStore parses the index, opens no shard).
  const WeightStore index((p / "model.safetensors.index.json").string());
  std::vector<std::pair<std::string, std::string>> files = {
      {"model.safetensors.index.json", (p / "model.safetensors.index.json").string()}};
  for (const std::string& shard : index.files())  // full paths, sorted
    files.emplace_back(fs::path(shard).lexically_relative(p).string(), shard);
  return files;
}

nlohmann::ordered_json source_record(const std::string& path) {
  const auto files = source_weight_files(path);
  nlohmann::ordered_json record = nlohmann::ordered_json::array();
  // Stat before hashing: a file written while it is hashed then fails the cheap check next time.
  for (const auto& [name, full] : files) {
    const FileStat st = stat_file(full);
    record.push_back({{"name", name}, {"size", st.size}, {"mtime_ns", st.mtime_ns}});
  }
  return {{"path", path}, {"sha256", sha256_files(full_paths(files))}, {"files", record}};
}

std::string check_source_weights(const nlohmann::json& source, const std::string& config_file) {
  const std::string path = source.at("path");
  if (!fs::exists(fs::path(path) / "model.safetensors") && !fs::exists(fs::path(path) / "model.safetensors.index.json"))
    fail(config_file, "refers to the original weights at " + path + ", which hold no model.safetensors (moved or deleted?)");
  if (!source.contains("sha256") || !source["sha256"].is_string())
    fail(config_file, "attnscope.source has no sha256 of the original weights at " + path);
  const std::string recorded = source["sha256"];
  std::vector<std::pair<std::string, std::string>> files;
  try {
    files = source_weight_files(path);
  } catch (const Error& e) {
    fail(config_file, "refers to the original weights at " + path + ": " + e.what());
  }
  for (const auto& [name, full] : files)
    if (!fs::is_regular_file(full))
      fail(config_file, "refers to the original weights at " + path + ", whose file " + name + " is missing (moved or deleted?)");
  const std::vector<std::string> changed = changed_files(source.contains("files") ? source["files"] : nlohmann::json(), files);
  if (changed.empty()) return path;
  const std::string now = sha256_files(full_paths(files));
  if (now != recorded)
    fail(config_file, "refers to the original weights " + join(changed) + ", which changed since the conversion: their sha256 is " +
                          now + ", attnscope.source.sha256 records " + recorded);
  return path;
}

}  // namespace attnscope::convert
