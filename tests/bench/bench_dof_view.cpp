// The DoF view's slider, end to end (issue 7: "slider move to redrawn chart under 50 ms"):
//
//   slider->setValue(p)  ->  valueChanged -> settingsChanged -> what the window does: core's
//   head_dofs + head_convergence + allocate -> DofView::show_state -> the queued replots run
//   (QCustomPlot::replot of every changed plot) and the widgets are painted.
//
// One iteration is that whole chain, timed in real time on the offscreen platform with the view
// shown at 1400 x 900. A lambda move redraws all four plots (heatmap values, both lambda lines,
// the bars); a budget move redraws only the bars.
//
// Spectra: ATTNSCOPE_BENCH_SPECTRA=FILE (`attnscope dof --out FILE`, e.g. of the bundled model)
// adds the "file" benchmarks; without it, synthetic spectra of three model shapes are used:
// 4 x 4 heads (the bundled model), 12 x 12 (GPT-2 small) and 32 x 32 (Llama 7B), J = 1024 exact
// eigenvalues per head plus the J/2 half, decaying as real heads do (a power law with an
// exponential tail), so dof_at costs what it costs on a real spectrum.
// Results: docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <QApplication>
#include <QSlider>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <qcustomplot.h>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "dof_view.h"
#include "workbench.h"
#include "figure_export.h"

using namespace attnscope;

namespace {

// What the DoF view's sliders ask core for (Workbench::set_dof_settings with multiple 1).
DofAllocation dof_allocation(const DofSpectra& s, double lambda, int64_t budget, AllocStrategy strategy) {
  AllocOptions o;
  o.strategy = strategy;
  o.budget = budget;
  return allocation_at(s, lambda, o);
}


HeadSpectrum synthetic_head(int J, double exponent, double tail) {
  HeadSpectrum h;
  double sum = 0;
  for (int i = 0; i < J; ++i) {
    const double e = std::pow(1.0 + i, -exponent) * std::exp(-tail * i);
    h.eigenvalues.push_back(e);
    sum += e;
  }
  for (double& e : h.eigenvalues) e /= sum;  // trace normalizer
  h.trace = 1;
  h.samples = J;
  h.resolution = J * 2.2e-16 * h.eigenvalues.front();
  return h;
}

std::shared_ptr<const DofSpectra> synthetic_spectra(int S, int H, int J = 1024) {
  auto sp = std::make_shared<DofSpectra>();
  sp->num_layers = S;
  sp->num_heads = H;
  sp->head_dim = 64;
  sp->model = "synthetic";
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      const double exponent = 1.2 + 0.8 * double((s * 7 + h * 3) % 11) / 10;
      HeadSpectrum full = synthetic_head(J, exponent, 0.004);
      full.half = std::make_shared<HeadSpectrum>(synthetic_head(J / 2, exponent * 1.05, 0.008));
      sp->heads.push_back(std::move(full));
    }
  return sp;
}

struct Bench {
  std::shared_ptr<const DofSpectra> spectra;
  std::unique_ptr<views::DofView> view;
  int replots = 0;

  explicit Bench(std::shared_ptr<const DofSpectra> sp) : spectra(std::move(sp)) {
    std::string why;
    if (!views::ensure_qt(&why)) throw std::runtime_error(why);
    view = std::make_unique<views::DofView>();
    view->resize(1400, 900);
    view->set_spectra(spectra);
    QObject::connect(view.get(), &views::DofView::settingsChanged, view.get(),
                     [this](double lambda, qint64 budget, AllocStrategy strategy) {
                       view->show_state(dof_allocation(*spectra, lambda, budget, strategy));
                     });
    for (views::PlotPanel* p : view->panels())
      QObject::connect(p->plot(), &QCustomPlot::afterReplot, [this] { ++replots; });
    view->show_state(dof_allocation(*spectra, view->lambda(), view->budget(), view->strategy()));
    view->show();
    settle();
  }
  // Runs the queued replots, then delivers the paint events they posted.
  static void settle() {
    QCoreApplication::processEvents();
    QCoreApplication::processEvents();
  }
};

void run_lambda(benchmark::State& state, std::shared_ptr<const DofSpectra> sp) {
  Bench b(std::move(sp));
  QSlider* slider = b.view->lambda_slider();
  int i = 0;
  b.replots = 0;
  for (auto _ : state) {
    slider->setValue(-48 + (i++ * 7) % 49);  // a different lambda every time
    Bench::settle();
  }
  state.counters["replots_per_move"] = double(b.replots) / double(state.iterations());
  state.counters["heads"] = double(b.spectra->heads.size());
}

void run_budget(benchmark::State& state, std::shared_ptr<const DofSpectra> sp) {
  Bench b(std::move(sp));
  QSlider* slider = b.view->budget_slider();
  int i = 0;
  b.replots = 0;
  for (auto _ : state) {
    slider->setValue(16 + (i++ * 13) % 200);
    Bench::settle();
  }
  state.counters["replots_per_move"] = double(b.replots) / double(state.iterations());
  state.counters["heads"] = double(b.spectra->heads.size());
}

// The computation alone (no Qt): what the window spends before show_state.
void run_compute(benchmark::State& state, std::shared_ptr<const DofSpectra> sp) {
  int i = 0;
  for (auto _ : state) {
    const auto st = dof_allocation(*sp, std::exp2((-48 + (i++ * 7) % 49) / 4.0), 64, AllocStrategy::Dof);
    benchmark::DoNotOptimize(st.allocation.mean_cost);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<std::pair<std::string, std::shared_ptr<const DofSpectra>>> sets;
  if (const char* path = std::getenv("ATTNSCOPE_BENCH_SPECTRA"))
    sets.emplace_back("file", std::make_shared<const DofSpectra>(load_spectra(path)));
  sets.emplace_back("synthetic_4x4", synthetic_spectra(4, 4));
  sets.emplace_back("synthetic_12x12", synthetic_spectra(12, 12));
  sets.emplace_back("synthetic_32x32", synthetic_spectra(32, 32));
  for (const auto& [name, sp] : sets) {
    benchmark::RegisterBenchmark(("LambdaSliderToRedrawnChart/" + name).c_str(), run_lambda, sp)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BudgetSliderToRedrawnChart/" + name).c_str(), run_budget, sp)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("ComputeOnly/" + name).c_str(), run_compute, sp)->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
