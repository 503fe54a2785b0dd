// `attnscope logits`: the model's logits for a text or an explicit id list, as safetensors, so
// they can be compared with any other implementation.
#include <ATen/ATen.h>

#include <iostream>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "common.h"

namespace attnscope::cli {

namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0) fail("--ids", "'" + item + "' is not a non-negative integer");
    ids.push_back(v);
  }
  if (ids.empty()) fail("--ids", "no ids given");
  return ids;
}

}  // namespace

void register_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Write logits [n, vocab] for a text or id list to a safetensors file");
  auto o = std::make_shared<LogitsOptions>();
  auto output = std::make_shared<OutputOptions>();
  o->model.model = default_model();
  add_option_table(cmd, logits_option_table(), o);
  exclusive(cmd, {"--text", "--ids"});
  add_out_option(cmd, output, "output .safetensors (tensors ids int64 [n], logits float32 [n, vocab])", true);
  cmd->callback([=] {
    const std::string* text = &o->text;
    const std::string* ids_arg = &o->ids;
    const std::string* out = &output->out;
    if (text->empty() && ids_arg->empty()) fail("logits", "give --text or --ids");
    LoadedModel m = load_model_of(o->model);
    std::vector<int64_t> ids = ids_arg->empty() ? m.tokenizer->encode_for_model(*text) : parse_ids(*ids_arg);
    if (ids.empty()) fail("--text", "the text has no tokens");
    const auto& c = m.model->config();
    for (int64_t id : ids)
      if (id >= c.vocab_size) fail("--ids", "id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(c.vocab_size) + ")");
    if (int64_t(ids.size()) > c.n_ctx)
      fail("logits", std::to_string(ids.size()) + " tokens exceed the context length " + std::to_string(c.n_ctx));
    at::InferenceMode guard;
    at::Tensor idt = at::tensor(ids);
    at::Tensor logits = m.model->forward(idt.view({1, -1})).squeeze(0).contiguous();
    write_safetensors(*out, {{"ids", idt}, {"logits", logits}}, {{"model", m.path}});
    std::cerr << "wrote " << *out << ": " << ids.size() << " tokens x " << logits.size(1) << " logits\n";
  });
}

}  // namespace attnscope::cli
