// DoF spectra on disk: one safetensors file, so any safetensors tool can read the eigenvalues.
#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"

namespace attnscope {
namespace {

constexpr const char* kFormat = "attnscope.dof_spectra";
// Version 2 added the log scale, the resolution and the J/2 half spectra; version 1 files read with
// c = 0, resolution 0 (unknown) and no half.
constexpr const char* kVersion = "2";

std::string eig_name(int s, int h, bool half = false) {
  return "layer_" + std::to_string(s) + ".head_" + std::to_string(h) + (half ? ".half_eigenvalues" : ".eigenvalues");
}

// A tensor that must exist with this dtype and shape.
at::Tensor expect(const SafetensorsFile& f, const std::string& name, at::ScalarType type,
                  const std::vector<int64_t>& shape) {
  if (!f.contains(name)) fail(f.path(), "not a complete DoF spectra file: no tensor '" + name + "'");
  at::Tensor t = f.tensor(name);
  if (t.scalar_type() != type) fail(f.path(), "tensor '" + name + "' has the wrong dtype");
  if (!shape.empty() && t.sizes().vec() != shape) fail(f.path(), "tensor '" + name + "' has the wrong shape");
  return t;
}

// The [S, H] tables of a spectra file's scalar fields.
struct Tables {
  at::Tensor trace, log_scale, resolution, samples, exact, sum_squares;
};

}  // namespace

void save_spectra(const std::string& path, const DofSpectra& sp) {
  const int S = sp.num_layers, H = sp.num_heads;
  if (S < 1 || H < 1 || sp.heads.size() != size_t(S) * size_t(H))
    fail(path, "cannot save DoF spectra: " + std::to_string(sp.heads.size()) + " heads for " +
                   std::to_string(S) + " layers x " + std::to_string(H) + " heads");
  NamedTensors tensors;
  // One [S, H] table per scalar field, for the spectra and their halves ("half_" prefix; a head
  // without a half keeps half_samples 0).
  auto tables = [&] {
    return Tables{at::zeros({S, H}, at::kDouble), at::zeros({S, H}, at::kDouble), at::zeros({S, H}, at::kDouble),
                  at::zeros({S, H}, at::kLong), at::ones({S, H}, at::kBool), at::zeros({S, H}, at::kDouble)};
  };
  Tables full = tables(), half = tables();
  auto put = [](Tables& t, int s, int h, const HeadSpectrum& hs) {
    t.trace[s][h] = hs.trace;
    t.log_scale[s][h] = hs.log_scale;
    t.resolution[s][h] = hs.resolution;
    t.samples[s][h] = hs.samples;
    t.exact[s][h] = hs.exact;
    t.sum_squares[s][h] = hs.sum_squares;
  };
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      const HeadSpectrum& hs = sp.head(s, h);
      tensors.emplace_back(eig_name(s, h), at::tensor(hs.eigenvalues, at::kDouble));
      put(full, s, h, hs);
      if (hs.half) {
        tensors.emplace_back(eig_name(s, h, true), at::tensor(hs.half->eigenvalues, at::kDouble));
        put(half, s, h, *hs.half);
      }
    }
  auto add = [&](const std::string& prefix, const Tables& t) {
    tensors.emplace_back(prefix + "trace", t.trace);
    tensors.emplace_back(prefix + "log_scale", t.log_scale);
    tensors.emplace_back(prefix + "resolution", t.resolution);
    tensors.emplace_back(prefix + "samples", t.samples);
    tensors.emplace_back(prefix + "exact", t.exact);
    tensors.emplace_back(prefix + "sum_squares", t.sum_squares);
  };
  add("", full);
  add("half_", half);

  const nlohmann::json settings = {{"samples", sp.settings.samples},
                                   {"max_samples", sp.settings.max_samples},
                                   {"normalize", dof_normalize_name(sp.settings.normalize)},
                                   {"seed", sp.settings.seed},
                                   {"exact_limit", sp.settings.exact_limit},
                                   {"top_k", sp.settings.top_k},
                                   {"block", sp.settings.block},
                                   {"lambda", sp.settings.lambda},
                                   {"tolerance", sp.settings.tolerance},
                                   {"device", sp.settings.device},
                                   {"batched", sp.settings.batched}};
  write_safetensors(path, tensors,
                    {{"format", kFormat},
                     {"version", kVersion},
                     {"settings", settings.dump()},
                     {"capture_dir", sp.capture_dir},
                     {"model", sp.model},
                     {"num_layers", std::to_string(S)},
                     {"num_heads", std::to_string(H)},
                     {"head_dim", std::to_string(sp.head_dim)}});
}

DofSpectra load_spectra(const std::string& path) {
  const SafetensorsFile f(path);  // missing, truncated or malformed files fail here, naming the path
  const auto& meta = f.metadata();
  auto get = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end()) fail(path, std::string("not a DoF spectra file (no '") + key + "' in its metadata)");
    return it->second;
  };
  if (get("format") != kFormat) fail(path, "not a DoF spectra file (format '" + get("format") + "')");
  const std::string version = get("version");
  if (version != "1" && version != kVersion) fail(path, "DoF spectra version '" + version + "' is not supported");
  const bool v1 = version == "1";

  DofSpectra sp;
  try {
    sp.num_layers = std::stoi(get("num_layers"));
    sp.num_heads = std::stoi(get("num_heads"));
    sp.head_dim = std::stoll(get("head_dim"));
    const nlohmann::json j = nlohmann::json::parse(get("settings"));
    sp.settings.samples = j.at("samples").get<int64_t>();
    sp.settings.normalize = parse_dof_normalize(j.at("normalize").get<std::string>());
    sp.settings.seed = j.at("seed").get<uint64_t>();
    sp.settings.exact_limit = j.at("exact_limit").get<int64_t>();
    sp.settings.top_k = j.at("top_k").get<int64_t>();
    // Written since the block Krylov fast path; older files get the defaults.
    sp.settings.block = j.value("block", sp.settings.block);
    // Spectra from before J per head were computed at one J: no doubling.
    sp.settings.max_samples = j.value("max_samples", sp.settings.samples);
    sp.settings.lambda = j.value("lambda", sp.settings.lambda);
    sp.settings.tolerance = j.value("tolerance", sp.settings.tolerance);
    sp.settings.device = j.value("device", sp.settings.device);
    sp.settings.batched = j.value("batched", sp.settings.batched);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path, std::string("malformed DoF spectra metadata: ") + e.what());
  }
  sp.capture_dir = get("capture_dir");
  sp.model = get("model");
  const int S = sp.num_layers, H = sp.num_heads;
  if (S < 1 || H < 1 || sp.head_dim < 1) fail(path, "DoF spectra metadata has a non-positive shape");

  auto tables = [&](const std::string& prefix) {
    auto v2_only = [&](const std::string& name) {
      return v1 ? at::zeros({S, H}, at::kDouble) : expect(f, prefix + name, at::kDouble, {S, H});
    };
    // sum_squares: written since the block Krylov fast path; 0 (unknown) in older files.
    const at::Tensor squares = f.contains(prefix + "sum_squares") ? expect(f, prefix + "sum_squares", at::kDouble, {S, H})
                                                                    : at::zeros({S, H}, at::kDouble);
    return Tables{expect(f, prefix + "trace", at::kDouble, {S, H}), v2_only("log_scale"), v2_only("resolution"),
                  expect(f, prefix + "samples", at::kLong, {S, H}), expect(f, prefix + "exact", at::kBool, {S, H}), squares};
  };
  const Tables full = tables("");
  const Tables half = v1 ? Tables{} : tables("half_");
  // One head's spectrum from its eigenvalue tensor and row (s, h) of the tables.
  auto read = [&](const Tables& t, int s, int h, const std::string& name) {
    const at::Tensor e = expect(f, name, at::kDouble, {}).contiguous();
    HeadSpectrum hs;
    hs.eigenvalues.assign(e.data_ptr<double>(), e.data_ptr<double>() + e.numel());
    hs.trace = t.trace[s][h].item<double>();
    hs.samples = t.samples[s][h].item<int64_t>();
    hs.exact = t.exact[s][h].item<bool>();
    hs.log_scale = t.log_scale[s][h].item<double>();
    hs.resolution = t.resolution[s][h].item<double>();
    hs.sum_squares = t.sum_squares[s][h].item<double>();
    // What dof_at relies on: a descending, non-negative, finite spectrum that fits its sample count.
    const int64_t n = int64_t(hs.eigenvalues.size());
    const std::string head = "head (" + std::to_string(s) + ", " + std::to_string(h) + ")";
    if (e.dim() != 1 || n < 1 || n > hs.samples || (hs.exact && n != hs.samples))
      fail(path, "tensor '" + name + "' does not match the head's sample count");
    if (!std::isfinite(hs.trace) || hs.trace < 0) fail(path, head + " has a bad trace in '" + name + "'");
    if (!std::isfinite(hs.log_scale)) fail(path, head + " has a log scale that is not finite");
    if (!std::isfinite(hs.resolution) || hs.resolution < 0) fail(path, head + " has a bad resolution");
    if (!std::isfinite(hs.sum_squares) || hs.sum_squares < 0) fail(path, head + " has a bad sum of squares");
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(hs.eigenvalues[i]) || hs.eigenvalues[i] < 0 || (i > 0 && hs.eigenvalues[i] > hs.eigenvalues[i - 1]))
        fail(path, "tensor '" + name + "' is not a descending list of non-negative eigenvalues");
    return hs;
  };
  sp.heads.reserve(size_t(S) * H);
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      HeadSpectrum hs = read(full, s, h, eig_name(s, h));
      if (!v1 && half.samples[s][h].item<int64_t>() > 0)
        hs.half = std::make_shared<const HeadSpectrum>(read(half, s, h, eig_name(s, h, true)));
      sp.heads.push_back(std::move(hs));
    }
  return sp;
}

}  // namespace attnscope
