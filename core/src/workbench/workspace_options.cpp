// The option table of `attnscope workspace` (workspace.h).
#include "attnscope/base/option_defs.h"
#include "attnscope/workbench/workspace.h"

namespace attnscope {

const OptionTable<WorkspaceOptions>& workspace_option_table() {
  using W = WorkspaceOptions;
  static const OptionTable<W> rows = {
      bind(opt::root, &W::root),
      bind(opt::clean, &W::clean, true),
      bind(opt::older_than, &W::older_than),
  };
  return rows;
}

}  // namespace attnscope
