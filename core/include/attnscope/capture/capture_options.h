// The options of a capture (CaptureOptions) and of `attnscope capture` (the model, the texts and
// those options): the catalogue's definitions (option_defs.h) bound to their fields, for the CLI,
// the workbench's command lines and the tables that nest them (report, gui).
#pragma once
#include <string>
#include <vector>

#include "attnscope/base/dtype.h"
#include "attnscope/base/options.h"
#include "attnscope/capture/capture.h"
#include "attnscope/model/model_options.h"

namespace attnscope {

// The dtypes a capture stores q, k, v in: f32, f16 (one name table; Error with quantity "capture dtype").
DType parse_capture_dtype(const std::string& name);
const char* capture_dtype_name(DType dtype);
std::vector<std::string> capture_dtype_names();

// --seq-len, --num-seqs, --seed, --store-dtype, --pre-rope, --batch.
const OptionTable<CaptureOptions>& capture_option_table();

// `attnscope capture`: what capture_to_dir is given.
struct CaptureCommand {
  ModelOptions model;
  std::vector<std::string> texts;
  CaptureOptions capture;
};
const OptionTable<CaptureCommand>& capture_command_option_table();

}  // namespace attnscope
