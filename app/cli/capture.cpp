// `attnscope capture`: per-layer q, k, v of T windows x L tokens into a capture store.
#include <iostream>

#include "attnscope/capture/capture.h"
#include "attnscope/capture/capture_options.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "common.h"

namespace attnscope::cli {

void register_capture(CLI::App& app) {
  auto* cmd = app.add_subcommand("capture", "Capture queries, keys and values of every layer and head");
  auto c = std::make_shared<CaptureCommand>();
  auto output = std::make_shared<OutputOptions>();
  c->model.model = default_model();
  add_option_table(cmd, capture_command_option_table(), c);
  require(cmd, "--text");
  add_out_option(cmd, output, "capture directory (replaced only when the capture succeeds)", true);
  cmd->callback([=] {
    // An explicit --num-seqs is a must; the default is a most, so a short text gives the windows it has.
    CaptureOptions opt = c->capture;
    opt.fewer_windows_ok = cmd->get_option("--num-seqs")->count() == 0;
    const std::string* out = &output->out;
    auto docs = read_text_documents(c->texts);
    LoadedModel m = load_model_of(c->model);
    // The same job runner as the workbench's, here in the foreground with a terminal bar.
    int64_t taken = 0;
    run_job(JobKind::Capture, "capture " + std::to_string(opt.num_seqs) + " x " + std::to_string(opt.seq_len) + " tokens",
            invocation(),
            [&](Job& job) { taken = capture_to_dir(m, docs, opt, *out, job.progress()).num_seqs(); },
            terminal_progress("capture"));
    const auto& c = m.model->config();
    std::cerr << "captured " << c.n_layer << " layers x " << c.n_head << " heads, " << taken << " x " << opt.seq_len
              << " tokens -> " << *out << "\n";
    if (taken < opt.num_seqs)
      std::cerr << "note: " << taken << " windows of " << opt.seq_len << " tokens: the text is short (" << opt.num_seqs
                << " by default; --num-seqs N asks for exactly N)\n";
  });
}

}  // namespace attnscope::cli
