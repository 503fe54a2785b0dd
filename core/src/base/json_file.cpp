// JSON files (json_file.h).
#include "attnscope/base/json_file.h"

#include <fstream>

#include "attnscope/base/error.h"

namespace attnscope {
namespace {

template <class Json, class Input>
Json parse(Input&& in, const std::string& where) {
  try {
    return Json::parse(std::forward<Input>(in));
  } catch (const std::exception& e) {
    fail(where, std::string("is not valid JSON: ") + e.what());
  }
}

template <class Json>
Json read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be read");
  Json j = parse<Json>(in, path);
  if (!j.is_object()) fail(path, "is not a JSON object");
  return j;
}

}  // namespace

nlohmann::ordered_json parse_json_text(const std::string& text, const std::string& where) {
  return parse<nlohmann::ordered_json>(text, where);
}

nlohmann::json read_json_file(const std::string& path) { return read_file<nlohmann::json>(path); }
nlohmann::ordered_json read_ordered_json_file(const std::string& path) { return read_file<nlohmann::ordered_json>(path); }

}  // namespace attnscope
