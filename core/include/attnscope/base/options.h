// Options: every option of every command defined once (as llama.cpp's common/arg.cpp).
//
// An OptionDef is an option as the user meets it: its flags, the quantity it sets (the word core's
// errors use: Error::quantity()), its help, its key in job.json and session files, what kind of
// value it takes and the range of that value. The catalogue (option_defs.h) holds every one of
// them. A command binds the definitions it takes to the fields of its options struct
// (bind(def, &O::field)); the rows it gets are its option table, from which
//   - the CLI registers the command's flags (app/cli: add_option_table),
//   - the command line that reproduces a job is written (option_args, command_for),
//   - job.json and the session's Train form are written and read (options_json, read_options_json),
//   - every value is checked (check_options: each row's own range), and
//   - an error is named by the flag (CLI) or the control (window) that set it.
// A job that runs other jobs holds their options (LinearizeOptions holds a DistillOptions and a
// FinetuneOptions) and takes their rows with nest(), so their ranges and checks are theirs.
#pragma once
#include <cstdint>
#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "attnscope/base/command_line.h"
#include "attnscope/base/error.h"

namespace attnscope {

// What an option's value is: how the CLI parses it, its JSON type in job.json and session files,
// and which control the window gives it.
enum class OptionKind {
  Text,      // a path or free text (JSON string)
  Whole,     // an integer (JSON integer)
  Unsigned,  // an integer >= 0 up to 2^64 - 1: seeds (JSON unsigned integer)
  Number,    // a real number (JSON number)
  Name,      // one word of a name table (JSON string)
  Flag,      // present or not (JSON true/false)
  Texts,     // repeated, one value each time (JSON array of strings)
  Wholes,    // comma-separated integers, each in the range: "128,512" (JSON array of integers)
  Names,     // comma-separated words of a name table: "l2,softmax" (JSON array of strings)
};

// The values a number takes: lo..hi, each end closed unless open.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const;
  // "1..1000000000" (whole numbers), "(0, 1000]" (real numbers).
  std::string describe(bool whole) const;
};
inline Range whole_range(int64_t lo, int64_t hi) { return {double(lo), double(hi), false, false}; }
// Real numbers above lo (open) up to hi (closed): (0, hi].
inline Range positive_range(double hi = std::numeric_limits<double>::infinity()) { return {0, hi, true, false}; }

// An option as the user meets it, once for every command that takes it.
struct OptionDef {
  const char* flags;     // CLI11 names, e.g. "-M,--features"; the last is the long form written back
  const char* quantity;  // what it sets, in the user's words ("feature dimension"); Error::quantity()
  const char* help;
  const char* key;       // its key in job.json and session files, a path ("optimizer.lr"); "" = none
  OptionKind kind;
  Range range{};         // Whole, Number, Wholes: the values it takes
};

// `d` with the values one command takes (a narrower or wider range; 0 for "not given" where the
// command reads it so): the same option, its flags, quantity, help and key.
inline OptionDef with_range(OptionDef d, Range r) {
  d.range = r;
  return d;
}

// One row of a command's option table: a definition bound to the command's options O.
template <class O>
struct Option {
  const char* flags = "";
  const char* quantity = "";
  const char* help = "";
  const char* key = "";
  OptionKind kind = OptionKind::Text;
  Range range;
  std::vector<std::string> choices;  // Name: the valid words
  // The value as an argument reads it back; "" = not given (left out of command lines and files).
  // A Flag gives "1" when set; Texts join their values with '\n'.
  std::function<std::string(const O&)> get;
  // Parses `text` into the options after checking it against the row's kind, range and choices;
  // Error with quantity() = the row's quantity otherwise. Texts: appends one value.
  std::function<void(O&, const std::string&)> set;
  // Flag: back to "not given"; Texts: no values. Empty for the other kinds.
  std::function<void(O&)> clear;
  // Flag: the field's value when the flag is given (--untied gives tied = false). job.json and
  // sessions record the field's value itself.
  bool flag_value = true;
  // Written back even when it is the options' default (false: left out at the default).
  bool write_default = true;
  // `get` without only_when's condition (empty: `get`): what the default is compared with.
  std::function<std::string(const O&)> value;
  // A file value that means "not given" (an integer's unset value: "0"); read as absent.
  std::string unset_text;
  // "" is a value of its own, written as '' (report's --feature-map '': softmax only, where the
  // default is a map); false: "" is "not given".
  bool empty_given = false;

  std::string flag() const { return long_flag(flags); }
};
template <class O>
using OptionTable = std::vector<Option<O>>;

// ---- binding a definition to a field ----

namespace option_detail {
[[noreturn]] void out_of_range(const OptionDef& d, const std::string& text);
double parse_in_range(const OptionDef& d, const std::string& text);  // Number
int64_t parse_whole_in_range(const OptionDef& d, const std::string& text);
int parse_int_in_range(const OptionDef& d, const std::string& text);  // also within int's range
// "128,512": each in the range; Error with the quantity for an empty list or item.
std::vector<int64_t> parse_wholes_in_range(const OptionDef& d, const std::string& text);
// "l2,softmax": each one of `choices` (any word when there are none).
std::vector<std::string> parse_names(const OptionDef& d, const std::string& text, const std::vector<std::string>& choices);
// `name` one of `choices`, else Error with the quantity listing them.
void check_choice(const OptionDef& d, const std::string& name, const std::vector<std::string>& choices);
std::string join_lines(const std::vector<std::string>& values);
template <class T>
std::string join_commas(const std::vector<T>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ",";
    if constexpr (std::is_same_v<T, std::string>) s += values[i];
    else s += std::to_string(values[i]);
  }
  return s;
}
// A fresh O, made once. (GCC 12 takes the clean-up of a partly made ReportOptions for a read of
// an uninitialized string: -Wmaybe-uninitialized, a false positive.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <class O>
const O& defaults_of() {
  static const O d{};
  return d;
}
#pragma GCC diagnostic pop
template <class O>
Option<O> row(const OptionDef& d) {
  Option<O> r;
  r.flags = d.flags, r.quantity = d.quantity, r.help = d.help, r.key = d.key, r.kind = d.kind, r.range = d.range;
  return r;
}
}  // namespace option_detail

// An integer field (Whole). `unset`: the value that means "not given" (0 for "the default"), left
// out of command lines; an explicit value must still be in the definition's range.
template <class O>
Option<O> bind(const OptionDef& d, int64_t O::*field, std::optional<int64_t> unset = std::nullopt) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field, unset](const O& o) { return unset && o.*field == *unset ? std::string() : std::to_string(o.*field); };
  r.set = [field, d](O& o, const std::string& v) { o.*field = option_detail::parse_whole_in_range(d, v); };
  if (unset) r.unset_text = std::to_string(*unset);
  return r;
}
// An int field (Whole), as the int64_t one.
template <class O>
Option<O> bind(const OptionDef& d, int O::*field, std::optional<int64_t> unset = std::nullopt) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field, unset](const O& o) { return unset && o.*field == *unset ? std::string() : std::to_string(o.*field); };
  r.set = [field, d](O& o, const std::string& v) { o.*field = option_detail::parse_int_in_range(d, v); };
  if (unset) r.unset_text = std::to_string(*unset);
  return r;
}
// A seed (Unsigned).
template <class O>
Option<O> bind(const OptionDef& d, uint64_t O::*field) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field](const O& o) { return std::to_string(o.*field); };
  r.set = [field, d](O& o, const std::string& v) { o.*field = parse_unsigned(v, d.quantity); };
  return r;
}
// A real number (Number), in the definition's range.
template <class O>
Option<O> bind(const OptionDef& d, double O::*field) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field](const O& o) { return number_arg(o.*field); };
  r.set = [field, d](O& o, const std::string& v) { o.*field = option_detail::parse_in_range(d, v); };
  return r;
}
// A real number with its own notation (lambda: "2^-8"): parse and print, then the range.
template <class O>
Option<O> bind(const OptionDef& d, double O::*field, double (*parse)(const std::string&), std::string (*print)(double)) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field, print](const O& o) { return print(o.*field); };
  r.set = [field, d, parse](O& o, const std::string& v) {
    double x = 0;
    try {
      x = parse(v);
    } catch (const Error& e) {
      if (!e.quantity().empty()) throw;
      throw Error(e.what(), d.quantity);  // the parser's words, the option's quantity
    }
    if (!d.range.contains(x)) option_detail::out_of_range(d, v);
    o.*field = x;
  };
  return r;
}
// An integer reached through `ref` (a field of a field, or one that several rows share).
template <class O>
Option<O> bind_at(const OptionDef& d, int64_t& (*ref)(O&), std::optional<int64_t> unset = std::nullopt) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [ref, unset](const O& o) {
    const int64_t v = ref(const_cast<O&>(o));
    return unset && v == *unset ? std::string() : std::to_string(v);
  };
  r.set = [ref, d](O& o, const std::string& v) { ref(o) = option_detail::parse_whole_in_range(d, v); };
  if (unset) r.unset_text = std::to_string(*unset);
  return r;
}
// Text (a path): "" is not given. Name: one of `choices`.
template <class O>
Option<O> bind(const OptionDef& d, std::string O::*field, std::vector<std::string> choices = {}) {
  Option<O> r = option_detail::row<O>(d);
  r.choices = choices;
  r.get = [field](const O& o) { return o.*field; };
  r.set = [field, d, choices](O& o, const std::string& v) {
    if (!choices.empty()) option_detail::check_choice(d, v, choices);
    o.*field = v;
  };
  return r;
}
// Text checked by `check` (Error with the definition's quantity for a bad value): a device name
// with an index (cuda:1), a feature map or "" for none.
template <class O>
Option<O> bind_checked(const OptionDef& d, std::string O::*field, void (*check)(const std::string&)) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field](const O& o) { return o.*field; };
  r.set = [field, d, check](O& o, const std::string& v) {
    try {
      check(v);
    } catch (const Error& e) {
      if (!e.quantity().empty()) throw;
      throw Error(e.what(), d.quantity);
    }
    o.*field = v;
  };
  return r;
}
// A flag that sets `field` to `when_given` (e.g. --untied sets tied = false).
template <class O>
Option<O> bind(const OptionDef& d, bool O::*field, bool when_given) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field, when_given](const O& o) { return o.*field == when_given ? std::string("1") : std::string(); };
  r.set = [field, when_given](O& o, const std::string&) { o.*field = when_given; };
  r.clear = [field, when_given](O& o) { o.*field = !when_given; };
  r.flag_value = when_given;
  return r;
}
// A flag that sets `field` to `value` (--json sets the format to JSON); given when the field holds
// it, cleared back to the options' default.
template <class O, class E>
Option<O> bind_value(const OptionDef& d, E O::*field, E value) {
  Option<O> r = option_detail::row<O>(d);
  r.kind = OptionKind::Flag;
  r.get = [field, value](const O& o) { return o.*field == value ? std::string("1") : std::string(); };
  r.set = [field, value](O& o, const std::string&) { o.*field = value; };
  r.clear = [field](O& o) { o.*field = O{}.*field; };
  return r;
}
// Comma-separated integers (Wholes), each in the definition's range: "--seq-len 128,512" where a
// command takes several.
template <class O, class T>
Option<O> bind_list(const OptionDef& d, std::vector<T> O::*field) {
  static_assert(std::is_integral_v<T>, "a list of integers");
  Option<O> r = option_detail::row<O>(d);
  r.kind = OptionKind::Wholes;
  r.get = [field](const O& o) { return option_detail::join_commas(o.*field); };
  r.set = [field, d](O& o, const std::string& v) {
    std::vector<T> out;
    for (int64_t x : option_detail::parse_wholes_in_range(d, v)) {
      if (x < int64_t(std::numeric_limits<T>::min()) || x > int64_t(std::numeric_limits<T>::max()))
        option_detail::out_of_range(d, std::to_string(x));
      out.push_back(T(x));
    }
    o.*field = out;
  };
  return r;
}
// Comma-separated names (Names), each one of `choices`: "--loss l2,softmax".
template <class O>
Option<O> bind_list(const OptionDef& d, std::vector<std::string> O::*field, std::vector<std::string> choices) {
  Option<O> r = option_detail::row<O>(d);
  r.kind = OptionKind::Names;
  r.choices = choices;
  r.get = [field](const O& o) { return option_detail::join_commas(o.*field); };
  r.set = [field, d, choices](O& o, const std::string& v) { o.*field = option_detail::parse_names(d, v, choices); };
  return r;
}
// Repeated text (Texts): each value appended.
template <class O>
Option<O> bind(const OptionDef& d, std::vector<std::string> O::*field) {
  Option<O> r = option_detail::row<O>(d);
  r.get = [field](const O& o) { return option_detail::join_lines(o.*field); };
  r.set = [field](O& o, const std::string& v) { (o.*field).push_back(v); };
  r.clear = [field](O& o) { (o.*field).clear(); };
  return r;
}
// A name of a name table (Name): E through its parse and print functions; with optional E, unset
// is not given.
template <class O, class E>
Option<O> bind(const OptionDef& d, E O::*field, E (*parse)(const std::string&), const char* (*print)(E),
               std::vector<std::string> choices) {
  Option<O> r = option_detail::row<O>(d);
  r.choices = std::move(choices);
  r.get = [field, print](const O& o) { return std::string(print(o.*field)); };
  r.set = [field, parse](O& o, const std::string& v) { o.*field = parse(v); };
  return r;
}
template <class O, class E>
Option<O> bind(const OptionDef& d, std::optional<E> O::*field, E (*parse)(const std::string&), const char* (*print)(E),
               std::vector<std::string> choices) {
  Option<O> r = option_detail::row<O>(d);
  r.choices = std::move(choices);
  r.get = [field, print](const O& o) { return (o.*field) ? std::string(print(*(o.*field))) : std::string(); };
  r.set = [field, parse](O& o, const std::string& v) { o.*field = parse(v); };
  return r;
}

// ---- tables of jobs that hold other jobs' options ----

// Row `inner` of job I, for the job O that holds I as `member`: the same definition, reading and
// writing o.*member. Its key is `prefix` + the inner key ("stage1." + "steps").
template <class O, class I>
Option<O> nest(I O::*member, const Option<I>& inner, const char* prefix = "") {
  Option<O> r;
  r.flags = inner.flags, r.quantity = inner.quantity, r.help = inner.help, r.kind = inner.kind, r.range = inner.range;
  r.choices = inner.choices, r.write_default = inner.write_default, r.flag_value = inner.flag_value;
  r.unset_text = inner.unset_text;
  r.empty_given = inner.empty_given;
  if (inner.value) {
    const auto value = inner.value;
    r.value = [member, value](const O& o) { return value(o.*member); };
  }
  r.key = inner.key;
  if (*prefix && *inner.key) {
    static std::vector<std::unique_ptr<std::string>> keys;  // the joined keys live as long as the program
    keys.push_back(std::make_unique<std::string>(std::string(prefix) + inner.key));
    r.key = keys.back()->c_str();
  }
  const auto get = inner.get;
  const auto set = inner.set;
  r.get = [member, get](const O& o) { return get(o.*member); };
  r.set = [member, set](O& o, const std::string& v) { set(o.*member, v); };
  if (inner.clear) {
    const auto clear = inner.clear;
    r.clear = [member, clear](O& o) { clear(o.*member); };
  }
  return r;
}

// Every row of `table` (of the job I that O holds as `member`), appended to `into`.
template <class O, class I>
void nest_rows(OptionTable<O>& into, I O::*member, const OptionTable<I>& table, const char* prefix = "") {
  for (const Option<I>& row : table) into.push_back(nest(member, row, prefix));
}

// `row` under another definition: `as` gives the flags, quantity, help and key (its kind and range
// are the row's own unless `as` sets a range); an Error from the row's checks is reported with
// `as`'s quantity. For one job's option set twice in another (--lr and --finetune-lr).
template <class O>
Option<O> renamed(const Option<O>& row, const OptionDef& as) {
  Option<O> r = row;
  r.flags = as.flags, r.quantity = as.quantity, r.help = as.help, r.key = as.key;
  const std::string quantity = as.quantity, inner = row.quantity;
  const auto set = row.set;
  r.set = [set, quantity, inner](O& o, const std::string& v) {
    try {
      set(o, v);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind(inner, 0) == 0) msg = quantity + msg.substr(inner.size());
      throw Error(msg, quantity);
    }
  };
  return r;
}

// `row`, given only when `given(o)` (budget and lambda only with a strategy).
template <class O>
Option<O> only_when(Option<O> row, bool (*given)(const O&)) {
  const auto get = row.get;
  if (!row.value) row.value = get;
  row.get = [get, given](const O& o) { return given(o) ? get(o) : std::string(); };
  return row;
}

// `row` that also runs `after(o)` when it is set (--features clears linearize's strategy).
template <class O>
Option<O> then(Option<O> row, void (*after)(O&)) {
  const auto set = row.set;
  row.set = [set, after](O& o, const std::string& v) {
    set(o, v);
    after(o);
  };
  return row;
}

// `row` with another help text: the same option, described for this command.
template <class O>
Option<O> described(Option<O> row, const char* help) {
  row.help = help;
  return row;
}

// `row` whose "" is a value (written as ''): report's --feature-map '' (softmax only).
template <class O>
Option<O> with_empty_value(Option<O> row) {
  row.empty_given = true;
  return row;
}

// `row` written back only when it differs from the options' default (knobs that do not change
// the result, such as a batch size for speed).
template <class O>
Option<O> omitted_at_default(Option<O> row) {
  row.write_default = false;
  return row;
}

// ---- using a table ----

// The row whose long flag is `flag`; nullptr when none.
template <class O>
const Option<O>* find_option(const OptionTable<O>& table, const std::string& flag) {
  for (const auto& r : table)
    if (r.flag() == flag) return &r;
  return nullptr;
}
// The row whose long flag is `flag`; Error when the table has none (a programming error: the
// tables are static).
template <class O>
const Option<O>& option_by_flag(const OptionTable<O>& table, const std::string& flag) {
  if (const Option<O>* r = find_option(table, flag)) return *r;
  fail("option table", "no option " + flag);
}
// The row that sets `quantity`; nullptr when none.
template <class O>
const Option<O>* option_for(const OptionTable<O>& table, const std::string& quantity) {
  for (const auto& r : table)
    if (quantity == r.quantity) return &r;
  return nullptr;
}

// The arguments of every option the table's `get` gives a value for, in table order:
// {"--flag", value} or {"--flag"} for a set flag; rows not written at their default are left out
// when they equal it.
template <class O>
std::vector<std::string> option_args(const OptionTable<O>& table, const O& o) {
  std::vector<std::string> args;
  const O& defaults = option_detail::defaults_of<O>();  // what a row left out at its default is compared with
  for (const auto& row : table) {
    const std::string v = row.get(o);
    if ((v.empty() && !(row.empty_given && row.kind != OptionKind::Texts && row.kind != OptionKind::Flag)) ||
        (!row.write_default && v == (row.value ? row.value : row.get)(defaults)))
      continue;
    if (row.kind == OptionKind::Texts) {
      for (size_t start = 0; start <= v.size();) {
        const size_t end = std::min(v.find('\n', start), v.size());
        args.push_back(row.flag());
        args.push_back(v.substr(start, end - start));
        start = end + 1;
      }
      continue;
    }
    args.push_back(row.flag());
    if (row.kind != OptionKind::Flag) args.push_back(v);
  }
  return args;
}

// The arguments `args` (as option_args writes them: "--flag value", "--flag" for a flag) read into
// `o` through the table's rows, as the CLI parses them; Error for a flag the table does not have
// or a value its row refuses.
template <class O>
void read_option_args(const OptionTable<O>& table, const std::vector<std::string>& args, O& o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const Option<O>* row = find_option(table, args[i]);
    if (!row) fail("command line", "no option " + args[i]);
    if (row->kind == OptionKind::Flag) {
      row->set(o, "1");
      continue;
    }
    if (i + 1 >= args.size()) fail("command line", args[i] + " needs a value");
    row->set(o, args[++i]);
  }
}

// `o` as its command line gives it back: what a front end that shows the command line runs, so
// that both agree (options the table has no row for are the defaults, as for the CLI).
template <class O>
O through_command_line(const OptionTable<O>& table, const O& o) {
  O back;
  read_option_args(table, option_args(table, o), back);
  return back;
}

// `attnscope COMMAND` with every option of the table (shell-quoted), then `tail` (e.g. --out RUN).
template <class O>
std::string command_for(const char* command, const OptionTable<O>& table, const O& o,
                        const std::vector<std::string>& tail = {}) {
  std::vector<std::string> args = {command};
  const auto opts = option_args(table, o);
  args.insert(args.end(), opts.begin(), opts.end());
  args.insert(args.end(), tail.begin(), tail.end());
  return attnscope_command(args);
}

// Every row's value checked by the row's own rule (its kind, range and choices): an Error with the
// row's quantity for the first that fails. What every job runs before its first file.
template <class O>
void check_options(const OptionTable<O>& table, const O& o) {
  for (const auto& row : table) {
    const std::string v = row.get(o);
    if (v.empty() || row.kind == OptionKind::Flag || row.kind == OptionKind::Texts) continue;
    O scratch = o;
    row.set(scratch, v);
  }
}

// The values of the rows that have a key, as JSON under their key paths ("optimizer.lr" ->
// {"optimizer": {"lr": ...}}), each in its kind's JSON type; rows not given are left out.
template <class O>
nlohmann::ordered_json options_json(const OptionTable<O>& table, const O& o);
// Sets every row whose key is in `j`, checking its JSON type, kind, range and choices: Error
// naming `file` and the key ("FILE: 'train.steps' must be ..."). Keys that are absent keep o's
// values. `prefix` is put before each key in messages (a section of a session: "train.").
template <class O>
void read_options_json(const OptionTable<O>& table, const nlohmann::json& j, O& o, const std::string& file,
                       const std::string& prefix = "");

namespace option_detail {
void put(nlohmann::ordered_json& j, const char* key, OptionKind kind, const std::string& value);
// The JSON value at `key` (a path) or null; Error naming file and key when a step is not an object.
const nlohmann::json* find(const nlohmann::json& j, const char* key, const std::string& file, const std::string& prefix);
// The value at `key` as the text `set` takes, checked against the kind's JSON type; Error otherwise.
std::vector<std::string> texts_of(const nlohmann::json& v, OptionKind kind, const Range& range, const std::string& unset,
                                  const std::string& file, const std::string& name);
}  // namespace option_detail

template <class O>
nlohmann::ordered_json options_json(const OptionTable<O>& table, const O& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& row : table) {
    if (!*row.key) continue;
    const std::string v = row.get(o);
    if (row.kind == OptionKind::Flag) {
      option_detail::put(j, row.key, row.kind, (v == "1") == row.flag_value ? "1" : "");
      continue;
    }
    if (v.empty() && row.kind != OptionKind::Texts) continue;
    option_detail::put(j, row.key, row.kind, v);
  }
  return j;
}

template <class O>
void read_options_json(const OptionTable<O>& table, const nlohmann::json& j, O& o, const std::string& file,
                       const std::string& prefix) {
  for (const auto& row : table) {
    if (!*row.key) continue;
    const nlohmann::json* v = option_detail::find(j, row.key, file, prefix);
    if (!v) continue;
    const std::string name = prefix + row.key;
    if (!row.unset_text.empty() && v->is_number_integer() && v->dump() == row.unset_text) continue;  // not given
    const auto texts = option_detail::texts_of(*v, row.kind, row.range, row.unset_text, file, name);
    try {
      if (row.kind == OptionKind::Flag) {
        // The field's value: given when it is the flag's.
        if ((texts[0] == "1") == row.flag_value) row.set(o, "1");
        else row.clear(o);
        continue;
      }
      const bool text = row.kind == OptionKind::Text || row.kind == OptionKind::Name;
      if (text && texts[0].empty()) continue;  // not given
      if (row.clear) row.clear(o);
      for (const std::string& t : texts) row.set(o, t);
    } catch (const Error& e) {
      if (std::string(e.what()).rfind(file, 0) == 0) throw;
      fail(file, "'" + name + "' is not valid: " + e.what());
    }
  }
}

}  // namespace attnscope
