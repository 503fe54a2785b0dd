// The options of `attnscope gui`: the model (and tokenizer), the texts or a session, the first
// capture's size, the view shown, and --screenshot with its --timeout. The window computes in
// float32: no --dtype.
#pragma once
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/model/model_options.h"

namespace attnscope {

struct GuiOptions {
  ModelOptions model;  // "" = the bundled model
  std::vector<std::string> texts;
  std::string session;
  int seq_len = 0, num_seqs = 0;  // the first capture's; 0: the last used
  std::string screenshot;
  std::string view = "heads";  // view_names()
  double timeout = 600;        // seconds --screenshot waits for the first analysis
};
const OptionTable<GuiOptions>& gui_option_table();

}  // namespace attnscope
