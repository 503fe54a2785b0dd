// Reading a converted model (SPEC 7; convert/converted_model.h writes one): whether a directory
// is one, where its weights are, and the feature map of every head. The model loader (model.h)
// reads converted models through here, below the stages that make them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/formats/converted_json.h"

namespace attnscope {

// True when `dir`/config.json holds an "attnscope" object.
bool is_converted_model(const std::string& dir);

// Where the weights of converted model `dir` are: `dir` itself, or attnscope.source.path when they
// are referenced, after checking them against attnscope.source.sha256 (hashed only when a file's
// size or modification time differs from the record; formats/source_weights.h). Error naming
// dir/config.json and the referenced files when they are gone or changed since the conversion.
std::string converted_weights_dir(const std::string& dir);

// The maps in `file` (layers.{s}.heads.{h}.feature_map.{param}: a converted model's or a finished
// distillation job's feature_maps.safetensors) as `hdr` describes them: head (s, h) a map of
// hdr.map with hdr.dims[s][h] features, of the type hdr.types says (a softmax head has no tensors);
// a hybrid head's balance layers.{s}.heads.{h}.gamma (a finite scalar), a decayed head's
// decay.delta (fixed) or decay.w [d_model] and decay.b (gated). Every head's tensors must be there
// with the right shapes and nothing else. Throws Error naming the file and head.
std::shared_ptr<HeadFeatureMaps> read_feature_maps(const std::string& file, const ConvertedHeader& hdr, int n_layer, int n_head,
                                                   int64_t head_dim, int64_t d_model = 0);

// Reads feature_maps.safetensors of converted model `dir` against its "attnscope" object and the
// model's shape (n_layer x n_head heads of head_dim). Throws Error naming the file and head
// for anything missing or misshapen.
std::shared_ptr<HeadFeatureMaps> load_head_feature_maps(const std::string& dir, int n_layer, int n_head, int64_t head_dim,
                                                        int64_t d_model);

}  // namespace attnscope
