#include "dof_head_table.h"

#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

#include "attnscope/base/table.h"

namespace attnscope::views {

void DofHeadModel::set_state(const DofAllocation* state) {
  const int S = state ? int(state->head_dof.size()) : 0;
  const int H = S ? int(state->head_dof.front().size()) : 0;
  if (S != layers_ || H != heads_) {
    beginResetModel();
    state_ = state;
    layers_ = S, heads_ = H;
    endResetModel();
    return;
  }
  // The same heads: their values changed, the rows stay (a sorted view re-sorts).
  state_ = state;
  if (S * H > 0) emit dataChanged(index(0, 0), index(S * H - 1, Columns - 1));
}

int DofHeadModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : layers_ * heads_; }
int DofHeadModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : Columns; }

QVariant DofHeadModel::data(const QModelIndex& index, int role) const {
  if (!state_ || !index.isValid() || index.row() >= layers_ * heads_) return {};
  if (role != Qt::DisplayRole && role != Qt::UserRole && role != Qt::TextAlignmentRole && role != Qt::ToolTipRole) return {};
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  const int s = index.row() / heads_, h = index.row() % heads_;
  const DofValue& v = state_->head_dof[size_t(s)][size_t(h)];
  const DofConvergence* c = size_t(s) < state_->convergence.size() && size_t(h) < state_->convergence[size_t(s)].size()
                                ? &state_->convergence[size_t(s)][size_t(h)]
                                : nullptr;
  const auto& dims = state_->allocation.dims;
  const double dim = size_t(s) < dims.size() && size_t(h) < dims[size_t(s)].size() ? double(dims[size_t(s)][size_t(h)]) : NAN;
  double x = NAN;
  switch (Column(index.column())) {
    case Layer: x = s; break;
    case Head: x = h; break;
    case Dof: x = v.value; break;
    case Lower: x = v.lower; break;
    case Upper: x = v.upper; break;
    case Change: x = c && c->checked ? 100 * c->relative_change : NAN; break;
    case Converged:
      if (role == Qt::UserRole) return c && c->checked ? (c->converged ? 1 : 0) : -1;
      if (role == Qt::ToolTipRole) return tr("DoF moved more than 10% between J/2 and J: use a larger J");
      return !c || !c->checked ? QStringLiteral("–") : c->converged ? tr("yes") : tr("no *");
    case Dim: x = dim; break;
    case Columns: break;
  }
  if (role == Qt::UserRole) return std::isfinite(x) ? x : -1.0;  // unknown values sort first
  if (role == Qt::ToolTipRole) return tr("layer %1, head %2").arg(s).arg(h);
  if (!std::isfinite(x)) return QStringLiteral("–");
  const int col = index.column();
  return col == Layer || col == Head || col == Dim ? QString::number(int64_t(x))
                                                   : QString::fromStdString(fmt_number(x, col == Change ? 1 : 2));
}

QVariant DofHeadModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  switch (Column(section)) {
    case Layer: return tr("layer");
    case Head: return tr("head");
    case Dof: return tr("DoF");
    case Lower: return tr("lower");
    case Upper: return tr("upper");
    case Change: return tr("J/2 change %");
    case Converged: return tr("converged");
    case Dim: return tr("M");
    case Columns: break;
  }
  return {};
}

DofHeadTable::DofHeadTable(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  model_ = new DofHeadModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setDynamicSortFilter(true);
  view_ = new QTableView(this);
  view_->setModel(proxy_);
  view_->setSortingEnabled(true);
  view_->sortByColumn(-1, Qt::AscendingOrder);  // head order until a header is clicked
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view_->setAlternatingRowColors(true);
  view_->verticalHeader()->setVisible(false);
  // Fixed row heights and column widths: 1024 rows never measure their contents.
  view_->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 4);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  view_->horizontalHeader()->setStretchLastSection(true);
  for (int c = 0; c < DofHeadModel::Columns; ++c)
    view_->setColumnWidth(c, view_->fontMetrics().horizontalAdvance(model_->headerData(c, Qt::Horizontal).toString()) + 28);
  view_->setToolTip(tr("Every head: click a header to sort by it, a row to select the head"));
  layout->addWidget(view_);
  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& now) {
    if (quiet_ || !now.isValid()) return;
    const auto [l, h] = head_at(now.row());
    emit headSelected(l, h);
  });
}

void DofHeadTable::show_state(const DofAllocation& state) {
  state_ = state;
  model_->set_state(&state_);
}

void DofHeadTable::clear() {
  state_ = DofAllocation{};
  model_->set_state(nullptr);
}

std::pair<int, int> DofHeadTable::head_at(int row) const {
  const int source = proxy_->mapToSource(proxy_->index(row, 0)).row();
  const int H = std::max(1, model_->heads());
  return {source / H, source % H};
}

void DofHeadTable::select(int layer, int head) {
  const int H = model_->heads();
  if (layer < 0 || head < 0 || head >= H || layer * H + head >= model_->rowCount()) return;
  const QModelIndex i = proxy_->mapFromSource(model_->index(layer * H + head, 0));
  quiet_ = true;
  view_->selectionModel()->setCurrentIndex(i, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  quiet_ = false;
  view_->scrollTo(i);
}

}  // namespace attnscope::views
