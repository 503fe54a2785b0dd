// llama2.c checkpoints ("version 0" legacy layout): 7 int32 header fields then float32 tensors.
#pragma once
#include <string>

#include "attnscope/model/model.h"

namespace attnscope {

// Reads and validates the header and sizes against the file length; throws Error naming the file.
Model load_llama2c_model(const std::string& bin_path);
// The header alone (checked against the file's length), for `info`.
ModelConfig read_llama2c_config(const std::string& bin_path);

}  // namespace attnscope
