// Options (options.h): ranges, parsing in range, and the JSON form of a row's value.
#include "attnscope/base/options.h"

#include "attnscope/base/command_line.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnscope {

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  return above && below;
}

std::string Range::describe(bool whole) const {
  const auto num = [&](double v) {
    if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf");
    return whole ? std::to_string(int64_t(v)) : number_arg(v);
  };
  if (whole) return num(lo) + ".." + num(hi);
  return std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
}

namespace option_detail {

void out_of_range(const OptionDef& d, const std::string& text) {
  if (d.kind == OptionKind::Whole) fail_value(d.quantity, text + " is outside " + d.range.describe(true));
  fail_value(d.quantity, text + " is not a finite number in " + d.range.describe(false));
}

double parse_in_range(const OptionDef& d, const std::string& text) {
  const double v = parse_number(text, d.quantity);
  if (!std::isfinite(v) || !d.range.contains(v)) out_of_range(d, number_arg(v));
  return v;
}

int64_t parse_whole_in_range(const OptionDef& d, const std::string& text) {
  const int64_t v = parse_whole(text, d.quantity);
  if (!d.range.contains(double(v))) out_of_range(d, std::to_string(v));
  return v;
}

int parse_int_in_range(const OptionDef& d, const std::string& text) {
  const int64_t v = parse_whole_in_range(d, text);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) out_of_range(d, std::to_string(v));
  return int(v);
}

namespace {
std::vector<std::string> split_commas(const OptionDef& d, const std::string& text, const char* what) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t end = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, end - start));
    if (end == text.size()) break;
    start = end + 1;
  }
  for (const std::string& item : items)
    if (item.empty()) fail_value(d.quantity, "'" + text + "' is not a comma-separated list of " + what);
  return items;
}
}  // namespace

std::vector<int64_t> parse_wholes_in_range(const OptionDef& d, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(d, text, "integers")) out.push_back(parse_whole_in_range(d, item));
  return out;
}

void check_choice(const OptionDef& d, const std::string& name, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), name) != choices.end()) return;
  std::string all;
  for (const auto& c : choices) all += (all.empty() ? "" : ", ") + c;
  fail_value(d.quantity, "'" + name + "' is unknown (valid: " + all + ")");
}

std::vector<std::string> parse_names(const OptionDef& d, const std::string& text, const std::vector<std::string>& choices) {
  std::vector<std::string> out = split_commas(d, text, "names");
  if (!choices.empty())
    for (const std::string& name : out) check_choice(d, name, choices);
  return out;
}

std::string join_lines(const std::vector<std::string>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "\n" : "") + values[i];
  return s;
}

void put(nlohmann::ordered_json& j, const char* key, OptionKind kind, const std::string& value) {
  nlohmann::ordered_json* at = &j;
  std::string path = key;
  for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1)) {
    at = &(*at)[path.substr(0, dot)];
    if (!at->is_object()) *at = nlohmann::ordered_json::object();
  }
  nlohmann::ordered_json& v = (*at)[path];
  switch (kind) {
    case OptionKind::Whole: v = std::stoll(value); break;
    case OptionKind::Unsigned: v = std::stoull(value); break;
    case OptionKind::Number: v = number_of_arg(value); break;  // "2^-8" (lambda_arg) is 0.00390625, not 2
    case OptionKind::Flag: v = value == "1"; break;
    case OptionKind::Texts: {
      v = nlohmann::ordered_json::array();
      for (size_t start = 0; !value.empty() && start <= value.size();) {
        const size_t end = std::min(value.find('\n', start), value.size());
        v.push_back(value.substr(start, end - start));
        start = end + 1;
      }
      break;
    }
    case OptionKind::Wholes:
    case OptionKind::Names: {
      v = nlohmann::ordered_json::array();
      for (size_t start = 0; !value.empty() && start <= value.size();) {
        const size_t end = std::min(value.find(',', start), value.size());
        const std::string item = value.substr(start, end - start);
        if (kind == OptionKind::Wholes) v.push_back(std::stoll(item));
        else v.push_back(item);
        start = end + 1;
      }
      break;
    }
    default: v = value;
  }
}

const nlohmann::json* find(const nlohmann::json& j, const char* key, const std::string& file, const std::string& prefix) {
  const nlohmann::json* at = &j;
  std::string path = key, walked = prefix;
  for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1)) {
    const std::string step = path.substr(0, dot);
    walked += step;
    if (!at->is_object() || !at->contains(step)) return nullptr;
    at = &(*at)[step];
    if (!at->is_object()) fail(file, "'" + walked + "' must be a JSON object");
    walked += ".";
  }
  if (!at->is_object() || !at->contains(path)) return nullptr;
  return &(*at)[path];
}

std::vector<std::string> texts_of(const nlohmann::json& v, OptionKind kind, const Range& range, const std::string& unset,
                                  const std::string& file, const std::string& name) {
  const auto bad = [&](const std::string& what) { fail(file, "'" + name + "' " + what); };
  switch (kind) {
    case OptionKind::Whole: {
      const bool unset_apart = !unset.empty() && !range.contains(std::strtod(unset.c_str(), nullptr));
      const std::string want = "must be " + (unset_apart ? unset + " (the default) or " : std::string()) + "an integer in " +
                               range.describe(true);
      if (!v.is_number_integer()) bad(want);
      const double d = v.is_number_unsigned() ? double(v.get<uint64_t>()) : double(v.get<int64_t>());
      if (!range.contains(d)) bad(want + ", got " + v.dump());
      return {v.dump()};
    }
    case OptionKind::Unsigned:
      if (!v.is_number_unsigned()) bad("must be a non-negative integer");
      return {v.dump()};
    case OptionKind::Number: {
      const std::string want = "must be a finite number in " + range.describe(false);
      if (!v.is_number()) bad(want);
      const double d = v.get<double>();
      if (!std::isfinite(d) || !range.contains(d)) bad(want + ", got " + v.dump());
      return {number_arg(d)};
    }
    case OptionKind::Flag:
      if (!v.is_boolean()) bad("must be true or false");
      return {v.get<bool>() ? "1" : ""};
    case OptionKind::Wholes: {
      const std::string want = "must be an array of integers in " + range.describe(true);
      if (!v.is_array() || v.empty()) bad(want);
      std::string joined;
      for (const auto& e : v) {
        if (!e.is_number_integer()) bad(want);
        const double d = e.is_number_unsigned() ? double(e.get<uint64_t>()) : double(e.get<int64_t>());
        if (!range.contains(d)) bad(want + ", got " + e.dump());
        joined += (joined.empty() ? "" : ",") + e.dump();
      }
      return {joined};
    }
    case OptionKind::Names: {
      if (!v.is_array() || v.empty()) bad("must be an array of names");
      std::string joined;
      for (const auto& e : v) {
        if (!e.is_string() || e.get<std::string>().empty()) bad("must be an array of names");
        joined += (joined.empty() ? "" : ",") + e.get<std::string>();
      }
      return {joined};
    }
    case OptionKind::Texts: {
      if (!v.is_array()) bad("must be an array of strings");
      std::vector<std::string> out;
      for (const auto& e : v) {
        if (!e.is_string()) bad("must be an array of strings");
        out.push_back(e.get<std::string>());
      }
      return out;
    }
    default:
      if (!v.is_string()) bad("must be a string");
      return {v.get<std::string>()};
  }
}

}  // namespace option_detail
}  // namespace attnscope
