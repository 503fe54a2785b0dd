// job.json (job_file.h).
#include "attnscope/formats/job_file.h"

#include "attnscope/base/option_defs.h"

#include <filesystem>

#include "attnscope/base/command_line.h"

namespace attnscope {

std::string job_file(const std::string& run_dir) { return (std::filesystem::path(run_dir) / "job.json").string(); }

std::string resume_command(const std::string& command, const std::string& run_dir) {
  return attnscope_command({command, long_flag(opt::resume.flags), run_dir});
}

std::string job_kind(const std::string& run_dir) {
  const std::string path = job_file(run_dir);
  if (!std::filesystem::is_regular_file(path)) return "";
  const nlohmann::json j = read_json_file(path);
  if (!j.is_object()) fail(path, "is not a JSON object");
  if (!j.contains("kind")) return "distill";
  if (!j["kind"].is_string()) fail(path, "'kind' must be a string");
  return j["kind"].get<std::string>();
}

namespace job_detail {

void merge(nlohmann::ordered_json& into, const nlohmann::ordered_json& from) {
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (it.value().is_object() && into.contains(it.key()) && into[it.key()].is_object()) merge(into[it.key()], it.value());
    else into[it.key()] = it.value();
  }
}

nlohmann::json read(const std::string& run_dir, const char* kind) {
  const std::string path = job_file(run_dir);
  if (!std::filesystem::exists(path)) fail(run_dir, "is not a run directory (no job.json)");
  nlohmann::json j = read_json_file(path);
  if (j.contains("kind") && j["kind"] != kind)
    fail(path, std::string("is not a ") + kind + " job (its kind is " + j["kind"].dump() + ")");
  return j;
}

}  // namespace job_detail
}  // namespace attnscope
