#include "attnscope/workbench/view_data.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "attnscope/attention/gram.h"
#include "attnscope/base/error.h"

namespace attnscope {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

HeadValues per_head(const std::vector<HeadAnalysis>& analysis, int layers, int heads,
                    const std::function<double(const HeadAnalysis&)>& get) {
  HeadValues out(size_t(std::max(0, layers)), std::vector<double>(size_t(std::max(0, heads)), kNaN));
  for (const HeadAnalysis& a : analysis)
    if (a.layer >= 0 && a.layer < layers && a.head >= 0 && a.head < heads) out[size_t(a.layer)][size_t(a.head)] = get(a);
  return out;
}

double linear_monotonicity(const HeadAnalysis& h) {
  return h.linear && h.linear->monotonicity ? h.linear->monotonicity->spearman : kNaN;
}
double linear_discordant(const HeadAnalysis& h) {
  return h.linear && h.linear->monotonicity ? h.linear->monotonicity->discordant_fraction : kNaN;
}
double linear_entropy(const HeadAnalysis& h) { return h.linear ? h.linear->entropy : kNaN; }
double linear_kl(const HeadAnalysis& h) { return h.linear && h.linear->kl ? *h.linear->kl : kNaN; }

bool any_finite(const HeadValues& v) {
  for (const auto& row : v)
    for (double x : row)
      if (std::isfinite(x)) return true;
  return false;
}

// The finite range of several grids: [0, 1] when none has a finite value, [v, v + 1] when every
// value is v (a range must be wider than a point to map to colours).
std::pair<double, double> finite_range(std::initializer_list<const HeadValues*> grids) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const HeadValues* g : grids)
    for (const auto& row : *g)
      for (double x : row)
        if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (lo > hi) return {0, 1};
  if (!(hi > lo)) hi = lo + 1;
  return {lo, hi};
}

}  // namespace

HeadValues grid_metric_values(GridMetric metric, const std::vector<HeadAnalysis>& analysis, const DofAllocation* dof,
                              int layers, int heads) {
  switch (metric) {
    case GridMetric::SoftmaxEntropy:
      return per_head(analysis, layers, heads, [](const HeadAnalysis& h) { return h.softmax.entropy; });
    case GridMetric::SoftmaxNormalizedEntropy:
      return per_head(analysis, layers, heads, [](const HeadAnalysis& h) { return h.softmax.normalized_entropy; });
    case GridMetric::SoftmaxDecay:  // 1 - a = 1 / decay length: 0 where no decay fits, near 1 for the last key only
      return per_head(analysis, layers, heads, [](const HeadAnalysis& h) { return 1.0 / h.decay_length; });
    case GridMetric::LinearEntropy: return per_head(analysis, layers, heads, linear_entropy);
    case GridMetric::LinearMonotonicity: return per_head(analysis, layers, heads, linear_monotonicity);
    case GridMetric::LinearDiscordant: return per_head(analysis, layers, heads, linear_discordant);
    case GridMetric::Kl: return per_head(analysis, layers, heads, linear_kl);
    case GridMetric::Dof: {
      HeadValues out(size_t(std::max(0, layers)), std::vector<double>(size_t(std::max(0, heads)), kNaN));
      if (!dof) return out;
      for (size_t l = 0; l < dof->head_dof.size() && int(l) < layers; ++l)
        for (size_t h = 0; h < dof->head_dof[l].size() && int(h) < heads; ++h) out[l][h] = dof->head_dof[l][h].value;
      return out;
    }
  }
  return {};
}

std::vector<GridMetric> available_grid_metrics(const std::vector<HeadAnalysis>& analysis, const DofAllocation* dof) {
  std::vector<GridMetric> out;
  for (const std::string& name : grid_metric_names()) {
    const GridMetric m = parse_grid_metric(name);
    // Probing every head is O(S H): the grid of each metric over the analysis's own extent.
    int layers = 0, heads = 0;
    for (const HeadAnalysis& a : analysis) layers = std::max(layers, a.layer + 1), heads = std::max(heads, a.head + 1);
    if (dof && !dof->head_dof.empty()) {
      layers = std::max(layers, int(dof->head_dof.size()));
      heads = std::max(heads, int(dof->head_dof.front().size()));
    }
    if (any_finite(grid_metric_values(m, analysis, dof, layers, heads))) out.push_back(m);
  }
  return out;
}

int histogram_bins(size_t n) {
  return std::clamp(int(std::ceil(std::sqrt(double(std::max<size_t>(n, 1))))) + 2, 5, 24);
}

std::vector<Histogram> common_histograms(const std::vector<std::vector<double>>& series, int bins) {
  if (bins < 1) fail_value("histogram bins", std::to_string(bins) + " must be at least 1");
  std::vector<double> all;
  for (const auto& s : series)
    for (double x : s)
      if (std::isfinite(x)) all.push_back(x);
  std::vector<Histogram> out(series.size());
  const Histogram shape = histogram(all, bins);  // the common edges
  if (shape.edges.empty()) return out;
  const int n = int(shape.counts.size());
  for (size_t i = 0; i < series.size(); ++i) {
    out[i].edges = shape.edges;
    out[i].counts.assign(size_t(n), 0);
    for (double x : series[i]) {
      if (!std::isfinite(x)) continue;
      // As histogram(): bin b is [edges[b], edges[b+1]), the last one closed on the right.
      const int b = std::clamp(int(std::upper_bound(shape.edges.begin(), shape.edges.end(), x) - shape.edges.begin()) - 1,
                               0, n - 1);
      out[i].counts[size_t(b)] += 1;
    }
  }
  return out;
}

MetricsFigures metrics_figures(const std::vector<HeadAnalysis>& analysis, int layers, int heads) {
  MetricsFigures f;
  f.has_analysis = layers > 0 && heads > 0 && !analysis.empty();
  f.has_linear = f.has_analysis &&
                 std::any_of(analysis.begin(), analysis.end(), [](const HeadAnalysis& h) { return h.linear.has_value(); });
  f.softmax_entropy.values = grid_metric_values(GridMetric::SoftmaxEntropy, analysis, nullptr, layers, heads);
  f.linear_entropy.values = grid_metric_values(GridMetric::LinearEntropy, analysis, nullptr, layers, heads);
  f.linear_monotonicity.values = grid_metric_values(GridMetric::LinearMonotonicity, analysis, nullptr, layers, heads);
  f.linear_discordant.values = grid_metric_values(GridMetric::LinearDiscordant, analysis, nullptr, layers, heads);
  f.kl.values = grid_metric_values(GridMetric::Kl, analysis, nullptr, layers, heads);
  // Both entropies on one range, so that softmax and the feature map compare by colour too.
  const auto entropy = finite_range({&f.softmax_entropy.values, &f.linear_entropy.values});
  f.softmax_entropy.lo = f.linear_entropy.lo = entropy.first;
  f.softmax_entropy.hi = f.linear_entropy.hi = entropy.second;
  f.linear_monotonicity.lo = -1, f.linear_monotonicity.hi = 1;
  f.linear_discordant.lo = 0, f.linear_discordant.hi = std::max(0.5, finite_range({&f.linear_discordant.values}).second);
  f.kl.lo = 0, f.kl.hi = std::max(1e-12, finite_range({&f.kl.values}).second);

  std::vector<double> se, le;
  for (const HeadAnalysis& h : analysis) {
    se.push_back(h.softmax.entropy);
    if (h.linear) le.push_back(h.linear->entropy);
  }
  const std::vector<Histogram> hists = common_histograms({se, le}, histogram_bins(se.size()));
  f.softmax_histogram = hists[0];
  if (!le.empty()) f.linear_histogram = hists[1];

  f.mixer_classes = {"Toeplitz", "causal low-rank", "RetNet decay", "SSD", "SSD + D", "semiseparable"};
  for (const HeadAnalysis& h : analysis)
    if (h.mixers && h.mixers->window_size > 0) f.mixer_window = h.mixers->window_size;
  if (f.mixer_window > 0) f.mixer_classes.push_back("window " + std::to_string(f.mixer_window) + " + SSD");
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      f.mixer_rows.push_back("L" + std::to_string(l) + " H" + std::to_string(h));
      f.mixers.values.emplace_back(f.mixer_classes.size(), kNaN);
    }
  for (const HeadAnalysis& h : analysis)
    if (h.mixers && h.layer >= 0 && h.layer < layers && h.head >= 0 && h.head < heads) {
      const MixerDistances& m = *h.mixers;
      std::vector<double> row = {m.toeplitz, m.causal_low_rank, m.retnet, m.ssd, m.ssd_d, m.semiseparable};
      if (f.mixer_window > 0) row.push_back(m.window);
      f.mixers.values[size_t(h.layer * heads + h.head)] = row;
      // The row names the student that fits the head best (the conversion's --decay mixer for it).
      const Student student = best_student(m);
      f.mixer_rows[size_t(h.layer * heads + h.head)] += " → " + student_name(student);
      ++f.mixer_students[size_t(student.decay)];
      f.mixer_windows += student.window;
      f.mixer_state = m.state_size;
      f.has_mixers = true;
    }
  f.mixers.lo = 0;
  f.mixers.hi = finite_range({&f.mixers.values}).second;
  if (f.has_mixers) {  // the --decay most heads point at
    size_t most = 0;
    for (size_t i = 1; i < f.mixer_students.size(); ++i)
      if (f.mixer_students[i] > f.mixer_students[most]) most = i;
    f.mixer_advice = "most heads: --decay " + std::string(decay_name(Decay(most))) + "; each head its own: --decay " +
                     decay_name(Decay::Mixer) + " (at N = " + std::to_string(kStudentMixerState) + ")";
    if (f.mixer_window > 0)
      f.mixer_advice += ", with --window " + std::to_string(f.mixer_window) + " the window for the " +
                        std::to_string(f.mixer_windows) + " heads that need it";
  }
  return f;
}

DofCurve dof_curve(const DofSpectra& spectra, int layer, int head, const std::vector<double>& lambdas) {
  if (layer < 0 || head < 0 || layer >= spectra.num_layers || head >= spectra.num_heads)
    fail_value("layer", "layer " + std::to_string(layer) + " head " + std::to_string(head) + " is outside the spectra's " +
                            std::to_string(spectra.num_layers) + " x " + std::to_string(spectra.num_heads) + " heads");
  const HeadSpectrum& sp = spectra.head(layer, head);
  DofCurve c;
  c.lambdas = lambdas;
  for (double lam : lambdas) {
    c.head.push_back(dof_at(sp, lam).value);
    if (sp.half) c.half.push_back(dof_at(*sp.half, lam).value);
    double top = 0;
    for (int h = 0; h < spectra.num_heads; ++h) top = std::max(top, dof_at(spectra.head(layer, h), lam).value);
    c.layer_max.push_back(top);
  }
  return c;
}

int64_t eigenvalues_above(const HeadSpectrum& spectrum, double lambda) {
  const double ridge = shifted_ridge(lambda, spectrum.log_scale);
  int64_t above = 0;
  for (double e : spectrum.eigenvalues) above += e > ridge;
  return above;
}

std::pair<double, double> shared_map_range(const HeadDetail& view, ColourScale scale) {
  if (view.length() == 0) return {0, 1};
  const MapRegion one{0, 1, 0, 1};  // the range is the whole map's whatever the region
  const MapImage a = map_image(view, MapKind::Softmax, scale, one, 1);
  if (!view.has_linear()) return {a.lo, a.hi};
  const MapImage b = map_image(view, MapKind::Linear, scale, one, 1);
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

}  // namespace attnscope
