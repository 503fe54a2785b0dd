// The model options (model_options.h): the catalogue's --model, --tokenizer and --dtype bound to
// ModelOptions, and the tables of logits and generate that nest them.
#include "attnscope/model/model_options.h"

#include "attnscope/base/option_defs.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/model/model.h"

namespace attnscope {

using MO = ModelOptions;

const OptionTable<ModelOptions>& model_source_option_table() {
  static const OptionTable<MO> rows = {
      bind(opt::model, &MO::model),
      bind(opt::tokenizer, &MO::tokenizer),
  };
  return rows;
}

const OptionTable<ModelOptions>& model_option_table() {
  static const OptionTable<MO> rows = [] {
    OptionTable<MO> t = model_source_option_table();
    t.push_back(compute_dtype_option<MO>());
    return t;
  }();
  return rows;
}

LoadedModel load_model(const ModelOptions& o, Device device) {
  return load_model(o.model, o.tokenizer, compute_dtype_of(o.compute, device));
}

const OptionTable<LogitsOptions>& logits_option_table() {
  static const OptionTable<LogitsOptions> rows = [] {
    OptionTable<LogitsOptions> t;
    nest_rows(t, &LogitsOptions::model, model_option_table());
    t.push_back(bind(opt::input_text, &LogitsOptions::text));
    t.push_back(bind(opt::ids, &LogitsOptions::ids));
    return t;
  }();
  return rows;
}

const OptionTable<GenerateOptions>& generate_option_table() {
  static const OptionTable<GenerateOptions> rows = [] {
    OptionTable<GenerateOptions> t;
    nest_rows(t, &GenerateOptions::model, model_option_table());
    t.push_back(bind(opt::prompt, &GenerateOptions::prompt));
    t.push_back(bind(opt::prompts, &GenerateOptions::prompts));
    t.push_back(bind(opt::output_tokens, &GenerateOptions::steps, 0));
    t.push_back(bind(opt::new_tokens, &GenerateOptions::new_tokens, 0));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
