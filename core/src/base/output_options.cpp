// Where a command writes and what it prints (output_options.h): the catalogue's --out, --resume and
// output-format definitions bound to OutputOptions and FormatOptions.
#include "attnscope/base/output_options.h"

#include "attnscope/base/option_defs.h"

namespace attnscope {

OptionTable<OutputOptions> out_option_table(const char* help) {
  return {described(bind(opt::out, &OutputOptions::out), help)};
}

OptionTable<OutputOptions> resumable_out_option_table(const char* out_help, const char* resume_help) {
  return {described(bind(opt::out, &OutputOptions::out), out_help),
          described(bind(opt::resume, &OutputOptions::resume), resume_help)};
}

std::vector<std::string> out_args(const std::string& dir) {
  OutputOptions o;
  o.out = dir;
  return option_args(out_option_table(""), o);
}

namespace {
const OptionDef& format_definition(OutputFormat f) {
  switch (f) {
    case OutputFormat::Json: return opt::json;
    case OutputFormat::Csv: return opt::csv;
    case OutputFormat::Markdown: return opt::markdown;
    case OutputFormat::Latex: return opt::latex;
    default: fail("format_option_table", "text is the default format, not a flag");
  }
}
}  // namespace

OptionTable<FormatOptions> format_option_table(const std::vector<OutputFormat>& formats) {
  OptionTable<FormatOptions> t;
  for (const OutputFormat f : {OutputFormat::Json, OutputFormat::Csv, OutputFormat::Markdown, OutputFormat::Latex})
    for (const OutputFormat given : formats)
      if (given == f) t.push_back(bind_value(format_definition(f), &FormatOptions::format, f));
  return t;
}

std::vector<std::string> format_args(OutputFormat format) {
  if (format == OutputFormat::Text) return {};
  FormatOptions o;
  o.format = format;
  return option_args(format_option_table({format}), o);
}

}  // namespace attnscope
