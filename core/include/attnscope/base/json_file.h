// The one reader of JSON files: every file attnscope reads as JSON (job.json, sessions, config.json,
// manifests, reports) goes through here, so a file that is missing or malformed is named with its
// problem, never "[json.exception.parse_error.101]".
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace attnscope {

// The JSON object in `path`. Error naming the file when it cannot be read ("cannot be read"), is
// not JSON ("is not valid JSON: ...") or is not an object ("is not a JSON object").
nlohmann::json read_json_file(const std::string& path);
nlohmann::ordered_json read_ordered_json_file(const std::string& path);

}  // namespace attnscope
