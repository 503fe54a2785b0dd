// Command lines: the `attnscope` line that reproduces a job (recorded in job.json, shown by
// `attnscope jobs` and the workbench's "Copy as command"), and the option tables they come from.
//
// An option table (as llama.cpp's common/arg.cpp) lists every option of a command once: its flags,
// the quantity it sets (the word core's errors use: Error::quantity()), its help, and how its value
// is read from and written back to the command's options struct. The CLI registers its options
// from the table, the command line is written from it, and an error about a quantity is mapped to
// its flag through it: adding an option is one row.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

template <class Options>
struct OptionSpec {
  const char* flags;     // CLI11 names, e.g. "-M,--features"; the last is the long form written back
  const char* quantity;  // what it sets, in the user's words ("feature dimension"); Error::quantity()
  const char* help;
  // The value as an argument reads it back ("" = not given: left out of the command line). A flag
  // without a value (`flag` below) gives "1" when set.
  std::string (*get)(const Options&);
  // Parses `text` into the options; throws Error with the quantity for a bad value.
  void (*set)(Options&, const std::string& text);
  bool flag = false;      // takes no value
  bool repeated = false;  // given once per value (--text a --text b): get joins them with '\n', set appends one
};

// An option's text as a number, all of it (no trailing characters, no leading space, in range), or
// an Error with quantity() = `quantity`: what an option table's set uses.
int64_t parse_whole(const std::string& text, const char* quantity);
uint64_t parse_unsigned(const std::string& text, const char* quantity);
double parse_number(const std::string& text, const char* quantity);  // "nan" and "inf" read as such

// The long form of an option's flags: "--features" for "-M,--features".
std::string long_flag(const char* flags);

// `arg` as one POSIX shell word: as is when it holds only safe characters, else in single quotes
// (a quote inside becomes '\'').
std::string shell_quote(const std::string& arg);
// "attnscope" followed by the quoted arguments.
std::string attnscope_command(const std::vector<std::string>& args);

// A double as an argument that reads back to the same number ("0.02", "1e-05"): the shortest
// decimal that does; "nan"/"inf" as strtod reads them.
std::string number_arg(double v);
// lambda as --lambda takes it and reads back to the same double: "2^-8" for powers of two, "2^-8.25"
// for the DoF view's quarter steps, else number_arg.
std::string lambda_arg(double lambda);

// The arguments of every option the table's `get` gives a value for, in table order:
// {"--flag", value} or {"--flag"} for a set flag.
template <class Options>
std::vector<std::string> option_args(const std::vector<OptionSpec<Options>>& table, const Options& o) {
  std::vector<std::string> args;
  for (const auto& row : table) {
    const std::string v = row.get(o);
    if (v.empty()) continue;
    if (row.repeated) {
      for (size_t start = 0; start <= v.size();) {
        const size_t end = std::min(v.find('\n', start), v.size());
        args.push_back(long_flag(row.flags));
        args.push_back(v.substr(start, end - start));
        start = end + 1;
      }
      continue;
    }
    args.push_back(long_flag(row.flags));
    if (!row.flag) args.push_back(v);
  }
  return args;
}

}  // namespace attnscope
