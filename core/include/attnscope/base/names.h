// One name table per set of names (as llama.cpp's llama-arch.cpp): an enum's values and the words
// that spell them in files, command lines and menus, written once, in one array beside the enum's
// functions. Parsing, printing and listing all read that array:
//
//   constexpr Named<Schedule> kSchedules[] = {{Schedule::Constant, "constant"}, {Schedule::Cosine, "cosine"}};
//   Schedule parse_schedule(const std::string& s) { return parse_name(kSchedules, s, "schedule"); }
//   const char* schedule_name(Schedule s) { return name_of(kSchedules, s); }
//   std::vector<std::string> schedule_names() { return names_of(kSchedules); }
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "attnscope/base/error.h"

namespace attnscope {

template <class E>
struct Named {
  E value;
  const char* name;
};

// The names of a table, in its order.
template <class E, size_t N>
std::vector<std::string> names_of(const Named<E> (&table)[N]) {
  std::vector<std::string> out;
  for (const Named<E>& n : table) out.push_back(n.name);
  return out;
}

// "a, b, c": the names of a table, for messages.
template <class E, size_t N>
std::string names_list(const Named<E> (&table)[N]) {
  std::string out;
  for (const Named<E>& n : table) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

// The name of `value`; every value of the enum is in its table (the tests check each table).
template <class E, size_t N>
const char* name_of(const Named<E> (&table)[N], E value) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  return "?";
}

// The value named `text`; otherwise Error with quantity() = `quantity`: "<quantity> 'text' is
// unknown (valid: a, b, c)".
template <class E, size_t N>
E parse_name(const Named<E> (&table)[N], const std::string& text, const char* quantity) {
  for (const Named<E>& n : table)
    if (text == n.name) return n.value;
  fail_value(quantity, "'" + text + "' is unknown (valid: " + names_list(table) + ")");
}

}  // namespace attnscope
