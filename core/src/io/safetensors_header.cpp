#include "attnscope/io/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"

namespace attnscope {

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

// Headers past this size are not a real checkpoint (HF's own limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

TensorEntry parse_entry(const std::string& name, const nlohmann::json& v, const std::string& file) {
  const std::string where = file + ": tensor '" + name + "'";
  if (!v.is_object()) fail(where, "header entry is not a JSON object");
  TensorEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail(where, "missing or non-string \"dtype\"");
  if (!dtype_from_name(dt->get<std::string>(), &e.dtype))
    fail(where, "unknown dtype \"" + dt->get<std::string>() + "\"");
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail(where, "missing or non-array \"shape\"");
  // The overflow guard uses the product of the non-zero dimensions: a shape like [0, 2^40, 2^40]
  // holds no elements, but torch still derives strides from the other dimensions, which must fit
  // in int64. Bounding that product by 2^63 / 16 also keeps numel x dtype size below 2^63.
  constexpr uint64_t kMaxProduct = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 16;
  uint64_t numel = 1;
  uint64_t nonzero_product = 1;
  for (const auto& d : *sh) {
    // nlohmann stores non-negative integers as unsigned, negative ones as signed.
    if (!d.is_number_unsigned())
      fail(where, "shape has a dimension that is not a non-negative integer");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > kMaxProduct || (dim != 0 && nonzero_product > kMaxProduct / dim))
      fail(where, "shape overflows");
    if (dim != 0) nonzero_product *= dim;
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail(where, "\"data_offsets\" must be two non-negative integers");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin) fail(where, "data_offsets end before they begin");
  const uint64_t want = numel * dtype_size(e.dtype);
  if (e.end - e.begin != want)
    fail(where, "shape x dtype needs " + std::to_string(want) + " bytes but data_offsets span " +
                    std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, std::size_t size,
                                           const std::string& file) {
  if (size < 8) fail(file, "too short for a safetensors file (" + std::to_string(size) + " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian u64
  if (n > kMaxHeaderBytes) fail(file, "header length " + std::to_string(n) + " is implausible");
  if (n > size - 8)
    fail(file, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes): truncated?");
  if (n < 2) fail(file, "header is empty");
  // nlohmann keeps the last of duplicate keys silently; a header naming a tensor (or a field) twice
  // is ambiguous, so the callback records the first duplicate and the header is refused.
  std::vector<std::set<std::string>> keys_per_object;
  std::string duplicate;
  auto watch_keys = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      keys_per_object.emplace_back();
    } else if (event == E::object_end) {
      if (!keys_per_object.empty()) keys_per_object.pop_back();
    } else if (event == E::key && !keys_per_object.empty() && duplicate.empty()) {
      if (!keys_per_object.back().insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(bytes + 8, bytes + 8 + n, watch_keys, false);
  if (j.is_discarded()) fail(file, "header is not valid JSON");
  if (!duplicate.empty()) fail(file, "header has the key '" + duplicate + "' more than once");
  if (!j.is_object()) fail(file, "header is not a JSON object");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t buffer = size - h.data_offset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(file, "\"__metadata__\" is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(file, "metadata value for '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorEntry e = parse_entry(it.key(), *it, file);
    if (e.end > buffer)
      fail(file, "tensor '" + e.name + "' ends at byte " + std::to_string(e.end) +
                     " of a data buffer of " + std::to_string(buffer) + " bytes: truncated?");
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (std::size_t i = 1; i < h.tensors.size(); ++i) {
    const auto& a = h.tensors[i - 1];
    const auto& b = h.tensors[i];
    if (b.begin < a.end)
      fail(file, "tensors '" + a.name + "' and '" + b.name + "' overlap in the data buffer");
  }
  return h;
}

}  // namespace attnscope
