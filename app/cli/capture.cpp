// `attnscope capture`: per-layer q, k, v of T windows x L tokens into a capture store.
#include <iostream>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "common.h"

namespace attnscope::cli {

void register_capture(CLI::App& app) {
  auto* cmd = app.add_subcommand("capture", "Capture queries, keys and values of every layer and head");
  auto args = std::make_shared<ModelArgs>();
  auto texts = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto opt = std::make_shared<CaptureOptions>();
  auto dtype = std::make_shared<std::string>("f32");
  args->add_to(cmd);
  cmd->add_option("-t,--text", *texts, ".txt or .jsonl (field \"text\") files, or - for standard input")->required();
  cmd->add_option("-L,--seq-len", opt->seq_len, "tokens per window")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  cmd->add_option("-T,--num-seqs", opt->num_seqs, "number of windows")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", opt->seed, "seed for drawing the windows")->capture_default_str();
  cmd->add_option("--store-dtype", *dtype, "the dtype q, k, v are stored in (the model computes in --dtype)")->check(CLI::IsMember({"f32", "f16"}))->capture_default_str();
  cmd->add_flag("--pre-rope", opt->pre_rope, "store q and k before the rotary embedding");
  cmd->add_option("--batch", opt->batch, "windows per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-o,--out", *out, "capture directory (replaced only when the capture succeeds)")->required();
  cmd->callback([=] {
    opt->dtype = *dtype == "f16" ? DType::F16 : DType::F32;
    auto docs = read_text_documents(*texts);
    LoadedModel m = args->load();
    // The same job runner as the workbench's, here in the foreground with a terminal bar.
    run_job(JobKind::Capture, "capture " + std::to_string(opt->num_seqs) + " x " + std::to_string(opt->seq_len) + " tokens",
            invocation(),
            [&](Job& job) { capture_to_dir(m, docs, *opt, *out, job.progress()); }, terminal_progress("capture"));
    const auto& c = m.model->config();
    std::cerr << "captured " << c.n_layer << " layers x " << c.n_head << " heads, " << opt->num_seqs << " x "
              << opt->seq_len << " tokens -> " << *out << "\n";
  });
}

}  // namespace attnscope::cli
