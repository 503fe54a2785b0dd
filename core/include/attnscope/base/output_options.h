// Where a command writes and what it prints, for every command: -o,--out (and --resume for a job
// that continues a run directory), and the output formats --json, --csv, --markdown, --latex. The
// catalogue's definitions (option_defs.h) bound to two small structs; a command registers these
// tables beside its own, and a command line ends with their arguments (option_args).
#pragma once
#include <string>
#include <vector>

#include "attnscope/base/options.h"

namespace attnscope {

struct OutputOptions {
  std::string out;     // -o,--out
  std::string resume;  // --resume RUN (resumable jobs only)
};
// --out, described for the command ("capture directory (replaced only when the capture succeeds)").
OptionTable<OutputOptions> out_option_table(const char* help);
// --out and --resume, for a job in a run directory (distill, finetune, linearize).
OptionTable<OutputOptions> resumable_out_option_table(const char* out_help, const char* resume_help);
// {"--out", dir}: the end of a command line that writes to `dir`.
std::vector<std::string> out_args(const std::string& dir);

// What a command prints: text (its default), or one of the formats its table offers.
enum class OutputFormat { Text, Json, Csv, Markdown, Latex };
struct FormatOptions {
  OutputFormat format = OutputFormat::Text;
};
// A flag row per format given (--json, --csv, --markdown, --latex), in that order; each sets the
// format (the CLI takes at most one of them).
OptionTable<FormatOptions> format_option_table(const std::vector<OutputFormat>& formats);
// {"--json"} for Json, ... ; {} for Text.
std::vector<std::string> format_args(OutputFormat format);

}  // namespace attnscope
