// job.json (SPEC 6), one format for every resumable job (distill, finetune, linearize): the kind of
// job, the command line that reproduces it, its options under their keys (options.h: the same
// definitions the CLI registers), and what the job resolved when it started (the model's path, the
// dims, the length it trained at):
//
//   {"kind": "distill", "command": "attnscope distill ... --out RUN", "model": "...",
//    ...options_json(table, options)..., ...resolved...}
//
// Reading checks every option by its own definition and names the file and the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/base/error.h"
#include "attnscope/base/json_file.h"
#include "attnscope/base/options.h"

namespace attnscope {

// The text of RUN/job.json: kind, command, the options, then `resolved` (keys merged, objects
// merged key by key: "optimizer" gets the options' learning rates and AdamW's constants).
template <class O>
std::string job_json(const char* kind, const std::string& command, const OptionTable<O>& table, const O& o,
                     const nlohmann::ordered_json& resolved = nlohmann::ordered_json::object());

// RUN/job.json: the whole JSON after checking that its "kind" is `kind` (absent is taken as it:
// hand-written files), with the options read into `o` (keys absent keep o's values). Error naming
// the file: "RUN is not a run directory (no job.json)" when it is missing.
template <class O>
nlohmann::json read_job_json(const std::string& run_dir, const char* kind, const OptionTable<O>& table, O& o);

// `attnscope COMMAND --resume RUN`.
std::string resume_command(const std::string& command, const std::string& run_dir);

// RUN/job.json's "kind" (distill, finetune, linearize): "" when RUN has no job.json, "distill" when
// the file has no kind (hand-written distill jobs, as read_job_json takes them). Error naming the
// file when it does not read or its kind is not a string.
std::string job_kind(const std::string& run_dir);

// The path of RUN/job.json.
std::string job_file(const std::string& run_dir);

namespace job_detail {
void merge(nlohmann::ordered_json& into, const nlohmann::ordered_json& from);
nlohmann::json read(const std::string& run_dir, const char* kind);
}  // namespace job_detail

template <class O>
std::string job_json(const char* kind, const std::string& command, const OptionTable<O>& table, const O& o,
                     const nlohmann::ordered_json& resolved) {
  nlohmann::ordered_json j;
  j["kind"] = kind;
  j["command"] = command;
  job_detail::merge(j, options_json(table, o));
  job_detail::merge(j, resolved);
  return j.dump(2) + "\n";
}

template <class O>
nlohmann::json read_job_json(const std::string& run_dir, const char* kind, const OptionTable<O>& table, O& o) {
  const nlohmann::json j = job_detail::read(run_dir, kind);
  read_options_json(table, j, o, job_file(run_dir));
  return j;
}

}  // namespace attnscope
