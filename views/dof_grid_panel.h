// The DoF view's panel (a): Table 2 live, the layer x head DoF at lambda with values, each layer's
// maximum in bold, heads whose estimate has not converged marked '*' and outlined (core's
// allocation_at: head_dof, convergence); a hover gives the bounds and the J/2 check.
#pragma once
#include "attnscope/allocation/allocation.h"
#include "value_heatmap.h"

namespace attnscope::views {

class DofGridPanel : public ValueHeatmap {
  Q_OBJECT
 public:
  explicit DofGridPanel(QWidget* parent = nullptr);
  void show_state(const DofAllocation& state);  // what core computed at the sliders' lambda
  void clear(const QString& note);              // no state: `note` instead

 private:
  DofAllocation state_;
  bool has_state_ = false;
};

}  // namespace attnscope::views
