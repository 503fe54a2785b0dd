// attnscope.source of a converted model (SPEC 7): the original weights it was made from. One
// definition of what the recorded sha256 covers, used when converting (source_record) and when a
// model whose weights are referenced is loaded (check_source_weights); attnscope_linear.py mirrors it.
//
// The sha256 is of the bytes of the weight files, one after another: a llama2.c .bin itself; in a
// model directory model.safetensors alone (what `sha256sum model.safetensors` prints), or
// model.safetensors.index.json followed by every shard it lists, sorted by name. Beside it,
// "files" records each file's name, size and modification time (ns since the Unix epoch): a load
// whose files all still have theirs skips the hash (cheap on repeat loads); any other load hashes
// them all and refuses a mismatch. Models converted before "files" was recorded are always hashed.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attnscope::convert {

// (name relative to `path`'s directory, full path) of the files the sha256 covers, in hashing
// order. `path` is a model directory or a llama2.c .bin. Throws Error naming a broken index.
std::vector<std::pair<std::string, std::string>> source_weight_files(const std::string& path);

// {"path", "sha256", "files": [{"name", "size", "mtime_ns"}]} of the weights at `path` (made
// absolute and normal by the caller).
nlohmann::ordered_json source_record(const std::string& path);

// Checks the weights that `source` (attnscope.source of `config_file`) points at against its
// sha256 and returns source.path. Throws Error naming `config_file` and the referenced files when
// they are gone or changed since the conversion.
std::string check_source_weights(const nlohmann::json& source, const std::string& config_file);

}  // namespace attnscope::convert
