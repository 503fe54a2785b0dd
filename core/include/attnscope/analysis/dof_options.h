// The options of the DoF spectra (DofSettings) and of `attnscope dof`: the catalogue's definitions
// (option_defs.h) bound to their fields, for the CLI (dof, allocate, report, bench dof) and the
// workbench's command lines.
#pragma once
#include <string>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/options.h"

namespace attnscope {

// "cpu", "cuda" or "cuda:N" (the words of parse_device, without asking whether this machine has
// CUDA: that is the job's to say); else Error with quantity "device".
void check_device_spec(const std::string& name);

// --lambda, --samples, --max-samples, --normalize, --seed, --exact-limit, --top-k, --tolerance,
// --device, --block. The knobs of the fast path (--max-samples and after) are written back only
// when they differ from their defaults.
const OptionTable<DofSettings>& dof_option_table();

// `attnscope dof`: the spectra of a capture (computed with the settings) or of a spectra file (the
// settings' lambda only).
struct DofCommand {
  std::string capture;
  std::string spectra;
  DofSettings settings;
};
// --capture, --spectra, then dof_option_table()'s rows but --block; the sampling rows are written
// back only with a capture.
const OptionTable<DofCommand>& dof_command_option_table();

}  // namespace attnscope
