// The whole analysis of a model in one directory a researcher can read or paste from (SPEC 2:
// Capture -> {Maps, Metrics, DoF} -> Allocation): the capture, DoF spectra, Algorithm 1 for every
// strategy (Table 1), the head DoF grid (Table 2), every head metric, the maps of the most and least
// complex heads, and figures when a FigureWriter is given. `attnscope report` and the workbench
// both call write_report; each stage's result is handed to the next, nothing is read back.
//
//   DIR/index.md                      what is where, with the two tables inline
//   DIR/capture/                      the capture store (attnscope capture)
//   DIR/spectra.safetensors           kept eigenvalues: `dof --spectra` / `allocate --spectra` reuse them
//   DIR/dof.json                      the `dof --json` document
//   DIR/table1_allocation.{md,tex,csv}, DIR/allocation.json, DIR/allocation/STRATEGY.json (allocation files)
//   DIR/table2_dof.{md,tex,csv}, DIR/per_head_dims.{md,tex,csv}
//   DIR/metrics.{json,csv,md}
//   DIR/figures/*.png                 DoF per head, layer DoF against lambda, entropy against DoF
//   DIR/maps/{most,least}_complex_*   softmax / linear / difference maps (CSV, PNG with figures)
//
// Written through OutputDir: a failed or cancelled report leaves no half-written directory, and an
// existing DIR is replaced only by a complete one.
#pragma once
#include <c10/core/ScalarType.h>

#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/figure.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"
#include "attnscope/base/table.h"

namespace attnscope {

struct ReportOptions {
  std::string model;                // anything load_model accepts
  std::string tokenizer;            // "" = the model's own
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h); unset: f32 on the CPU, bf16 on CUDA
  std::vector<std::string> texts;   // sample text files (text_source.h); at least one
  CaptureOptions capture;           // its sequence length is capped at the model's context length
  DofSettings dof;
  double lambda = kDefaultLambda;
  AnalysisOptions analysis = default_report_analysis();
  int64_t budget = 64;              // C
  int64_t multiple = 1;             // round dimensions to a multiple of this

  // The linear maps the report measures unless told otherwise: PRF with M = 64, and structured
  // mixers of state size 16.
  static AnalysisOptions default_report_analysis();
};

// Every option of `attnscope report` ReportOptions holds (report_options.cpp): the model's, the
// capture's (its seed as --capture-seed), the DoF's (--lambda sets both lambda and dof.lambda: the
// fast path certifies where the report reads), the allocation's and the analysis' (but its seed);
// the CLI registers them, the workbench writes its report's command line from them.
const OptionTable<ReportOptions>& report_option_table();

// Everything the report wrote, as objects (the GUI shows them without reading the files back).
struct ReportResult {
  std::string dir;          // the final directory
  std::string model_name;   // the model directory's name, as the tables print it
  DofSpectra spectra;
  std::vector<HeadAnalysis> heads;
  std::vector<Allocation> allocations;  // fix, dof, dof-clip, per-head
  Table table1, table2;
  int most_complex_layer = 0, most_complex_head = 0, least_complex_layer = 0, least_complex_head = 0;
};

// Throws Error for bad options (naming the quantity), and whatever a stage throws; Cancelled when
// `progress` throws it. `figures` may be null: tables only.
ReportResult write_report(const ReportOptions& options, const std::string& out_dir, const FigureWriter* figures,
                          const ProgressFn& progress = nullptr);

}  // namespace attnscope
