// The options of Algorithm 1 (AllocOptions) and of `attnscope allocate`: the catalogue's
// definitions (option_defs.h) bound to their fields, for the CLI (allocate, report) and the
// workbench's command lines.
#pragma once
#include <string>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/options.h"

namespace attnscope {

// --budget, --strategy, --multiple-of (written back when above 1).
const OptionTable<AllocOptions>& alloc_option_table();

// `attnscope allocate`: Algorithm 1 on the spectra of a file or of a capture (computed with the
// DoF settings), at the settings' lambda.
struct AllocateCommand {
  std::string spectra;
  std::string capture;
  DofSettings dof;
  AllocOptions alloc;
  StateBudget state;  // copied into alloc.state, with the capture's context and key/value heads as defaults
};
// --state-budget, --state-share, --context, --window (head types under a state budget).
const OptionTable<StateBudget>& state_budget_option_table();
// --spectra, --capture, dof_command_option_table()'s DoF rows, then alloc_option_table()'s.
const OptionTable<AllocateCommand>& allocate_command_option_table();

}  // namespace attnscope
