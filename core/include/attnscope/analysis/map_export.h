// One head's maps on one window written for a reader: softmax, linear and their difference as CSV
// with token labels on both axes, and as heatmaps when a FigureWriter is given.
#pragma once
#include <string>
#include <vector>

#include "attnscope/base/figure.h"
#include "attnscope/analysis/head_analysis.h"

namespace attnscope {

class CaptureStore;

// PREFIX_softmax.{csv,png}, and with a feature map PREFIX_linear.* and PREFIX_diff.*; returns the
// paths written. `figures` may be null (CSV only).
std::vector<std::string> write_head_maps(const CaptureStore& store, int layer, int head, int seq,
                                         const AnalysisOptions& opt, const std::string& prefix,
                                         const FigureWriter* figures);

// The matrix [rows, cols] as a CSV table whose header and first column are the labels.
void write_matrix_csv(const std::string& path, const Matrix& m, const std::vector<std::string>& labels);

}  // namespace attnscope
