#include "dof_grid_panel.h"

#include <algorithm>
#include <qcustomplot.h>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/base/table.h"

namespace attnscope::views {

namespace {

QString fmt(double v, int decimals) { return QString::fromStdString(fmt_number(v, decimals)); }

QStringList indices(int n) {
  QStringList out;
  for (int i = 0; i < n; ++i) out << QString::number(i);
  return out;
}

}  // namespace

DofGridPanel::DofGridPanel(QWidget* parent) : ValueHeatmap(tr("DoF per head (Table 2)"), tr("DoF"), parent) {
  QCustomPlot* p = plot();
  p->xAxis->setLabel(tr("head"));
  p->yAxis->setLabel(tr("layer"));
  set_footnote(tr("bold: the layer's maximum\n* not converged: DoF moved > 10% between J/2 and J"));
  set_csv([this]() -> std::string {
    return has_state_ ? to_csv(dof_grid_table(state_.head_dof, state_.lambda, state_.convergence)) : std::string();
  });
  set_tooltip([this](int s, int h) -> QString {
    if (!has_state_ || s >= int(state_.head_dof.size()) || h >= int(state_.head_dof[size_t(s)].size())) return {};
    const DofValue& v = state_.head_dof[size_t(s)][size_t(h)];
    QString text = tr("layer %1, head %2: DoF %3").arg(s).arg(h).arg(fmt(v.value, 2));
    if (v.upper > v.lower) text += tr(" [%1, %2]").arg(fmt(v.lower, 2), fmt(v.upper, 2));
    if (s < int(state_.convergence.size()) && h < int(state_.convergence[size_t(s)].size()) &&
        state_.convergence[size_t(s)][size_t(h)].checked) {
      const DofConvergence& c = state_.convergence[size_t(s)][size_t(h)];
      text += tr("\nJ = %1: %2, J/2 = %3: %4 (moved %5%)")
                  .arg(c.samples)
                  .arg(fmt(c.dof, 2))
                  .arg(c.samples_half)
                  .arg(fmt(c.dof_half, 2))
                  .arg(fmt(100 * c.relative_change, 1));
      if (c.unconverged()) text += tr("\nnot converged: use a larger J");
    }
    return text;
  });
}

void DofGridPanel::clear(const QString& note) {
  has_state_ = false;
  state_ = DofAllocation{};
  show_note(note);
}

void DofGridPanel::show_state(const DofAllocation& state) {
  state_ = state;
  has_state_ = true;
  const auto& hd = state.head_dof;
  const int S = int(hd.size()), H = S ? int(hd.front().size()) : 0;
  std::vector<std::vector<double>> values(size_t(S), std::vector<double>(size_t(H), 0.0));
  std::vector<std::vector<QString>> texts{size_t(S), std::vector<QString>(size_t(H))};
  std::vector<std::vector<bool>> bold(size_t(S), std::vector<bool>(size_t(H), false)), flagged = bold;
  double hi = 0;
  for (int s = 0; s < S; ++s) {
    int best = 0;
    for (int h = 0; h < H; ++h) {
      const double v = hd[size_t(s)][size_t(h)].value;
      values[size_t(s)][size_t(h)] = v;
      hi = std::max(hi, v);
      if (v > hd[size_t(s)][size_t(best)].value) best = h;
      flagged[size_t(s)][size_t(h)] = s < int(state.convergence.size()) && h < int(state.convergence[size_t(s)].size()) &&
                                      state.convergence[size_t(s)][size_t(h)].unconverged();
      const bool kept = s < int(state.allocation.types.size()) && state.allocation.types[size_t(s)][size_t(h)] == HeadType::Softmax;
      texts[size_t(s)][size_t(h)] = fmt(v, 1) + (flagged[size_t(s)][size_t(h)] ? "*" : "") + (kept ? " S" : "");
    }
    if (H > 0) bold[size_t(s)][size_t(best)] = true;
  }
  // One pass over the cells (a lambda step at 32 x 32 heads redraws 1024 of them).
  set_values(std::move(values), indices(S), indices(H), 0, hi > 0 ? hi : 1, 1, {std::move(texts), std::move(bold), std::move(flagged)});
}

}  // namespace attnscope::views
