// One head on one window as the workbench's heads view shows it: the softmax and linear maps with
// token labels, the per-row KL and entropies, and images of the maps in a colour scale, reduced to
// at most a given number of pixels so that a 4096-token map draws as fast as a 64-token one, and
// exact cell by cell once the user zooms in. The view draws these; it computes none of them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/figure.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/base/progress.h"

namespace attnscope {

class CaptureStore;

struct HeadDetail {
  int layer = 0, head = 0, seq = 0;
  int64_t head_dim = 0;
  std::vector<int64_t> ids;
  std::vector<std::string> labels;  // token_labels(): one per position
  Matrix softmax;                   // A [L, L], 0 above the diagonal
  Matrix linear;                    // Ahat [L, L] of the feature map; empty (rows 0) without one;
                                    // undefined rows are NaN on j <= i (attention/attention.h)
  std::vector<double> q, k;         // [L, d] row-major: for score()
  std::vector<double> row_kl;       // KL(A_i || Ahat_i) per row; NaN for undefined rows; empty without a map
  std::vector<double> row_entropy_softmax, row_entropy_linear;  // H_i (nats); linear empty without a map
  int64_t undefined_rows = 0;
  double nonpositive_row_fraction = 0;

  int length() const { return softmax.rows; }
  bool has_linear() const { return linear.rows > 0; }
  double score(int i, int j) const;  // q_i.k_j / sqrt(d), the pre-softmax score
};

// head_maps() of (layer, head, seq) plus everything above. Throws Error for an out-of-range layer,
// head or text window (quantity "text window": the captured sequence, not the hybrid's window),
// naming which.
HeadDetail head_detail(const CaptureStore& store, int layer, int head, int seq, const AnalysisOptions& opt);

// The overview grid: every head's softmax map on window `seq`, row-normalized and reduced to at
// most `pixels` a side (block max, as map_image), [S][H]. One layer's q, k in memory at a time.
std::vector<std::vector<Matrix>> head_thumbnails(const CaptureStore& store, int seq, int pixels,
                                                 const ProgressFn& progress = nullptr);

// What a map image shows.
enum class MapKind { Softmax, Linear, Difference };  // Difference = Ahat - A
// How values become colours:
//   linear  the weight itself
//   log     log10 of the weight, floored at 1e-6 (weights below it show as the floor); for the
//           difference a symmetric log: sign(x) log10(1 + |x| / 1e-4)
//   row     each row divided by its largest entry (largest |entry| for the difference; a row
//           of zeros stays zeros), so every query's own pattern is visible whatever its peak
//           (on a linear scale most of a 256-token map is one colour)
enum class ColourScale { Linear, Log, RowNormalized };
ColourScale parse_colour_scale(const std::string& name);  // one of colour_scale_names(); else Error
const char* colour_scale_name(ColourScale s);
std::vector<std::string> colour_scale_names();  // linear, log, row

// Cells [row0, row1) x [col0, col1) of an L x L map.
struct MapRegion {
  int row0 = 0, row1 = 0, col0 = 0, col1 = 0;
};

struct MapImage {
  Matrix pixels;      // at most max_pixels x max_pixels, in the scale's units; NaN = draw nothing
                      // (above the diagonal, undefined rows)
  MapRegion region;   // the cells the pixels cover (the requested region clipped to the map)
  int cells_per_pixel = 1;  // 1: exact cells; else each pixel is a block of this many cells a side
  double lo = 0, hi = 1;    // the colour range of the whole map in this scale (not just the
                            // region), so colours stay put while zooming; always lo < hi: a map
                            // of one value v gets [v - 1, v], a difference that is 0 everywhere
                            // [-1, 1], a map with no defined row the defaults
  bool diverging = false;   // the difference: a range symmetric around 0
};

// The region's cells in `scale`; when the region is wider than max_pixels, each pixel shows the
// block's largest value (largest |value| for the difference), so a single spike stays visible at
// overview zoom. Throws Error for an empty region or max_pixels < 1, or a Linear/Difference
// image of a view without a feature map.
MapImage map_image(const HeadDetail& view, MapKind kind, ColourScale scale, MapRegion region, int max_pixels);

// Points of the monotonicity scatter (paper 004, Figures 2-3): for causal cells (i, j <= i) of rows
// with >= 3 keys, the score q_i.k_j / sqrt(d) and the weights A_ij and Ahat_ij (NaN without a
// map). At most max_points cells, drawn without replacement with `seed` when there are more.
struct ScatterPoints {
  std::vector<double> score, softmax, linear;
};
ScatterPoints monotonicity_scatter(const HeadDetail& view, int max_points, uint64_t seed);

// A histogram of the finite values (NaN and inf are left out): `bins` equal bins over [min, max]
// (one bin when all values are equal). edges has bins + 1 entries; both are empty when no value
// is finite. Throws Error for bins < 1.
struct Histogram {
  std::vector<double> edges, counts;
};
Histogram histogram(const std::vector<double>& values, int bins);

}  // namespace attnscope
