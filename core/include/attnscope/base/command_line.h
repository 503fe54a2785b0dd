// Command lines: the words of the `attnscope` line that reproduces a job (recorded in job.json,
// shown by `attnscope jobs` and the workbench's "Copy as command"): shell quoting, and option
// values as text that reads back to the same value. The options themselves are options.h's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {


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
// `v` to 4 significant digits ("5.148", "0.0002315"): for progress lines and labels a person
// reads, never for a value read back.
std::string short_number(double v);
// lambda as --lambda takes it and reads back to the same double: "2^-8" for powers of two, "2^-8.25"
// for the DoF view's quarter steps, else number_arg.
std::string lambda_arg(double lambda);
// The number an argument written by number_arg or lambda_arg stands for ("2^-8" is std::pow(2, -8));
// NaN for text that is neither. job.json stores numbers, not their argument text.
double number_of_arg(const std::string& text);

}  // namespace attnscope
