// The one reader of JSON files: every file attnscope reads as JSON (job.json, sessions, config.json,
// manifests, reports) goes through here, so a file that is missing or malformed is named with its
// problem, never "[json.exception.parse_error.101]".
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/base/error.h"

namespace attnscope {

// The JSON object in `path`. Error naming the file when it cannot be read ("cannot be read"), is
// not JSON ("is not valid JSON: ...") or is not an object ("is not a JSON object").
nlohmann::json read_json_file(const std::string& path);
nlohmann::ordered_json read_ordered_json_file(const std::string& path);
// JSON held in memory (a setting, a pasted file) read with the same words, `where` naming it.
nlohmann::ordered_json parse_json_text(const std::string& text, const std::string& where);

// Typed reads of a JSON object read from `file`, one phrasing for every file: an absent key keeps
// the caller's value (hand-written files and files of earlier builds need only what they set); a
// value of the wrong type or out of range is an Error naming the file and the key
// ("FILE: 'capture.seq_len' must be an integer in 2..1048576, got 1"). `name` is the key as the
// message shows it (a path such as "capture.seq_len").
struct JsonReader {
  std::string file;

  [[noreturn]] void bad(const std::string& name, const std::string& what) const { fail(file, "'" + name + "' " + what); }

  template <class Json>
  const Json* find(const Json& obj, const char* key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  // `key` of `obj`, which must be there.
  template <class Json>
  const Json& at(const Json& obj, const char* key, const std::string& name) const {
    const Json* v = find(obj, key);
    if (!v) fail(file, "has no '" + name + "'");
    return *v;
  }
  template <class Json>
  const Json* object(const Json& obj, const char* key, const std::string& name) const {
    const Json* v = find(obj, key);
    if (v && !v->is_object()) bad(name, "must be a JSON object");
    return v;
  }
  template <class Json>
  void string(const Json& obj, const char* key, const std::string& name, std::string& out) const {
    if (const Json* v = find(obj, key)) {
      if (!v->is_string()) bad(name, "must be a string");
      out = v->template get<std::string>();
    }
  }
  // An integer in [lo, hi] (`what` describes them: "a positive integer"); floats and strings are
  // refused rather than rounded.
  template <class Json, class Int>
  void integer(const Json& obj, const char* key, const std::string& name, int64_t lo, int64_t hi, const char* what,
               Int& out) const {
    const Json* v = find(obj, key);
    if (!v) return;
    if (!v->is_number_integer()) bad(name, std::string("must be ") + what);
    // nlohmann keeps non-negative integers unsigned (up to 2^64 - 1) and negative ones signed.
    const bool ok = v->is_number_unsigned()
                        ? v->template get<uint64_t>() <= uint64_t(hi) && int64_t(v->template get<uint64_t>()) >= lo
                        : v->template get<int64_t>() >= lo && v->template get<int64_t>() <= hi;
    if (!ok) bad(name, std::string("must be ") + what + ", got " + v->dump());
    out = static_cast<Int>(v->template get<int64_t>());
  }
  template <class Json>
  void seed(const Json& obj, const char* key, const std::string& name, uint64_t& out) const {
    if (const Json* v = find(obj, key)) {
      if (!v->is_number_unsigned()) bad(name, "must be a non-negative integer");
      out = v->template get<uint64_t>();
    }
  }
  template <class Json>
  void boolean(const Json& obj, const char* key, const std::string& name, bool& out) const {
    if (const Json* v = find(obj, key)) {
      if (!v->is_boolean()) bad(name, "must be true or false");
      out = v->template get<bool>();
    }
  }
  // A finite number; `nullable`: null reads as NaN (a value a run did not measure).
  template <class Json>
  void number(const Json& obj, const char* key, const std::string& name, double& out, bool nullable = false) const {
    if (const Json* v = find(obj, key)) {
      if (nullable && v->is_null()) {
        out = std::nan("");
        return;
      }
      if (!v->is_number() || !std::isfinite(v->template get<double>())) bad(name, "must be a finite number");
      out = v->template get<double>();
    }
  }
  // A positive finite number (a learning rate, lambda).
  template <class Json>
  void positive(const Json& obj, const char* key, const std::string& name, double& out) const {
    if (const Json* v = find(obj, key)) {
      if (!v->is_number() || !(v->template get<double>() > 0) || !std::isfinite(v->template get<double>()))
        bad(name, "must be a positive finite number, got " + v->dump());
      out = v->template get<double>();
    }
  }
  // A name of one of core's name sets, read through its parser: the parser's message (which lists
  // the valid names) after the key.
  template <class Json, class E, class Parse>
  void name(const Json& obj, const char* key, const std::string& path, Parse parse, const char* (*print)(E), E& out) const {
    std::string text = print(out);
    string(obj, key, path, text);
    try {
      out = parse(text);
    } catch (const Error& e) {
      bad(path, std::string("is not valid: ") + e.what());
    }
  }
};

}  // namespace attnscope
