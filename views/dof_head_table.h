// The DoF view's per-head table: one row per head (1024 for 32 layers x 32 heads) with its layer,
// head, DoF at lambda with its fast-path bounds, the J/2 convergence check and the allocated feature
// dimension; sortable by any column (click its header), a row's click selects the head. A model
// over core's DofAllocation (no copy into items): a slider step swaps the state and the view
// repaints the rows in sight.
#pragma once
#include <QAbstractTableModel>
#include <QWidget>

#include "attnscope/allocation/allocation.h"

class QSortFilterProxyModel;
class QTableView;

namespace attnscope::views {

class DofHeadModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Layer, Head, Dof, Lower, Upper, Change, Converged, Dim, Columns };
  using QAbstractTableModel::QAbstractTableModel;
  void set_state(const DofAllocation* state);  // null: no rows; the state must outlive its use
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  // DisplayRole: the text; Qt::UserRole: the number the column sorts by.
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  int heads() const { return heads_; }

 private:
  const DofAllocation* state_ = nullptr;
  int layers_ = 0, heads_ = 0;
};

class DofHeadTable : public QWidget {
  Q_OBJECT
 public:
  explicit DofHeadTable(QWidget* parent = nullptr);
  void show_state(const DofAllocation& state);  // keeps its own copy
  void clear();
  void select(int layer, int head);  // selects and scrolls to the head's row; no signal
  QTableView* view() const { return view_; }
  DofHeadModel* model() const { return model_; }
  // (layer, head) of the row shown at `row` (in the current sort order).
  std::pair<int, int> head_at(int row) const;

 signals:
  void headSelected(int layer, int head);

 private:
  DofAllocation state_;
  DofHeadModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  bool quiet_ = false;
};

}  // namespace attnscope::views
