// The option table of `attnscope gui` (gui_options.h).
#include "attnscope/workbench/gui_options.h"

#include "attnscope/base/option_defs.h"
#include "attnscope/workbench/session.h"

namespace attnscope {

const OptionTable<GuiOptions>& gui_option_table() {
  using G = GuiOptions;
  static const OptionTable<G> rows = [] {
    OptionTable<G> t;
    nest_rows(t, &G::model, model_source_option_table());
    t.push_back(described(bind(opt::texts, &G::texts), "sample text files (default: resources/texts/*.txt)"));
    t.push_back(described(bind(opt::session, &G::session), "open a saved session (.attnscope) instead"));
    t.push_back(described(bind(opt::seq_len, &G::seq_len, 0), "tokens per window of the first capture (default: the last used)"));
    t.push_back(described(bind(opt::num_seqs, &G::num_seqs, 0), "windows of the first capture (default: the last used)"));
    t.push_back(bind(opt::screenshot, &G::screenshot));
    t.push_back(bind(opt::view, &G::view, view_names()));
    t.push_back(described(bind(opt::timeout, &G::timeout), "seconds --screenshot waits for the first analysis"));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
