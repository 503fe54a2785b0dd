// The capture's option tables (capture_options.h).
#include "attnscope/capture/capture_options.h"

#include "attnscope/base/names.h"
#include "attnscope/base/option_defs.h"

namespace attnscope {

namespace {
constexpr Named<DType> kCaptureDtypes[] = {{DType::F32, "f32"}, {DType::F16, "f16"}};
}  // namespace

DType parse_capture_dtype(const std::string& name) { return parse_name(kCaptureDtypes, name, opt::store_dtype.quantity); }
const char* capture_dtype_name(DType dtype) { return name_of(kCaptureDtypes, dtype); }
std::vector<std::string> capture_dtype_names() { return names_of(kCaptureDtypes); }

const OptionTable<CaptureOptions>& capture_option_table() {
  using C = CaptureOptions;
  static const OptionTable<C> rows = {
      bind(opt::seq_len, &C::seq_len),
      // Written only when chosen: at its default T is a most (a short text gives the windows it has).
      omitted_at_default(described(bind(opt::num_seqs, &C::num_seqs),
                                   "windows of the text to capture (given: exactly these; by default at most 8, fewer for a short text)")),
      described(bind(opt::seed, &C::seed), "seed for drawing the windows"),
      omitted_at_default(bind(opt::store_dtype, &C::dtype, parse_capture_dtype, capture_dtype_name, capture_dtype_names())),
      bind(opt::pre_rope, &C::pre_rope, true),
      omitted_at_default(described(bind(opt::batch, &C::batch), "windows per forward pass")),
  };
  return rows;
}

const OptionTable<CaptureCommand>& capture_command_option_table() {
  static const OptionTable<CaptureCommand> rows = [] {
    OptionTable<CaptureCommand> t;
    nest_rows(t, &CaptureCommand::model, model_option_table());
    t.push_back(described(bind(opt::texts, &CaptureCommand::texts), ".txt or .jsonl (field \"text\") files, or - for standard input"));
    nest_rows(t, &CaptureCommand::capture, capture_option_table());
    return t;
  }();
  return rows;
}

}  // namespace attnscope
