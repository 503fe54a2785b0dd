#include "dof_view.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QSlider>
#include <QSpinBox>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "dof_allocation_panel.h"
#include "dof_common.h"
#include "dof_curve_panel.h"
#include "dof_grid_panel.h"
#include "dof_head_table.h"
#include "dof_spectrum_panel.h"

namespace attnscope::views {

using namespace dof;

struct DofView::Impl : QObject {
  explicit Impl(DofView* v) : QObject(v), view(v) {}

  DofView* view;
  std::shared_ptr<const DofSpectra> spectra;
  DofAllocation state;
  bool has_state = false;
  int sel_layer = 0, sel_head = 0;
  bool quiet = false;         // set_controls: move without emitting
  double drawn_lambda = NAN;  // the lambda panels (a)-(c) show; NaN: redraw them
  std::vector<std::vector<HeadType>> drawn_types;  // the head types the grid marks
  QString pending;            // show_pending's note while there are no spectra

  QSlider* lambda = nullptr;
  QLabel* lambda_label = nullptr;
  QSlider* budget = nullptr;
  QSpinBox* budget_box = nullptr;
  QComboBox* strategy = nullptr;
  QDoubleSpinBox* state_share = nullptr;  // head types under a state budget: a share of the KV cache, 0 = off
  QToolButton* table_button = nullptr;
  QAction* head_dims_action = nullptr;

  DofGridPanel* grid_panel = nullptr;            // (a) Table 2
  DofHeadTable* head_table = nullptr;            // (a) the same per head as a sortable table
  QTabWidget* grid_tabs = nullptr;               // (a): heatmap | table
  DofSpectrumPanel* spectrum_panel = nullptr;    // (b) the selected head's eigenvalues
  DofCurvePanel* curve_panel = nullptr;          // (c) DoF against lambda
  DofAllocationPanel* alloc_panel = nullptr;     // (d) Table 1

  std::string model_name() const {
    if (!spectra) return "model";
    const std::string& p = spectra->model.empty() ? spectra->capture_dir : spectra->model;
    const std::string name = std::filesystem::path(p).filename().string();
    return name.empty() ? p : name;
  }

  const HeadSpectrum* selected_spectrum() const {
    if (!spectra || sel_layer >= spectra->num_layers || sel_head >= spectra->num_heads) return nullptr;
    return &spectra->head(sel_layer, sel_head);
  }

  QString which() const {
    return selected_spectrum() ? tr("layer %1, head %2").arg(sel_layer).arg(sel_head) : QString();
  }

  std::optional<double> head_dof() const {
    if (!has_state || sel_layer >= int(state.head_dof.size()) || sel_head >= int(state.head_dof[size_t(sel_layer)].size()))
      return std::nullopt;
    return state.head_dof[size_t(sel_layer)][size_t(sel_head)].value;
  }

  std::optional<double> lambda_shown() const { return has_state ? std::optional<double>(state.lambda) : std::nullopt; }

  // The selected head in panels (b) and (c), with the lambda line of the shown state.
  void draw_head() {
    spectrum_panel->show_spectrum(selected_spectrum(), which());
    spectrum_panel->show_lambda(lambda_shown());
    curve_panel->show_head(spectra.get(), sel_layer, sel_head, which());
    curve_panel->show_lambda(lambda_shown(), head_dof());
  }

  // Nothing to show: every panel empty, each saying why (`pending`, or that there are no spectra).
  void clear() {
    has_state = false;
    state = DofAllocation{};
    const QString note = pending.isEmpty() ? tr("No DoF spectra yet: capture first") : pending;
    grid_panel->clear(note);
    head_table->clear();
    spectrum_panel->show_spectrum(nullptr, {});
    spectrum_panel->show_lambda(std::nullopt);
    spectrum_panel->show_note(note);
    curve_panel->show_head(nullptr, 0, 0, {});
    curve_panel->show_lambda(std::nullopt, std::nullopt);
    curve_panel->show_note(note);
    alloc_panel->clear(note);
  }

  void table_dialog(DofTable which);
};

void DofView::Impl::table_dialog(DofTable which) {
  static const char* names[] = {"dof_per_head", "feature_dims", "per_head_dims"};
  const QString path = QFileDialog::getSaveFileName(
      view, tr("Export table"), QString::fromLatin1(names[int(which)]) + ".md",
      tr("Markdown (*.md);;LaTeX (*.tex);;CSV (*.csv)"));
  if (path.isEmpty()) return;
  try {
    view->export_table(which, path);
  } catch (const std::exception& e) {
    QMessageBox::critical(view, tr("Export failed"), QString::fromStdString(e.what()));
  }
}

// ---------------------------------------------------------------------------------------------

DofView::DofView(QWidget* parent) : QWidget(parent), d_(new Impl(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* controls = new QGridLayout;
  controls->setHorizontalSpacing(8);

  d_->lambda = new QSlider(Qt::Horizontal, this);
  d_->lambda->setRange(kLambdaMinPos, kLambdaMaxPos);
  d_->lambda->setSingleStep(1);
  d_->lambda->setPageStep(4);
  d_->lambda->setTickPosition(QSlider::TicksBelow);
  d_->lambda->setTickInterval(4);
  d_->lambda->setValue(-32);
  d_->lambda->setToolTip(tr("Tolerance λ of DoF(λ) = Σ μᵢ / (μᵢ + λ), on a log₂ scale from 2^-12 to 2^0 in quarter steps"));
  d_->lambda_label = new QLabel(lambda_label_text(-32), this);
  d_->lambda_label->setMinimumWidth(d_->lambda_label->fontMetrics().horizontalAdvance(lambda_label_text(-47)) + 8);
  controls->addWidget(new QLabel(tr("Lambda"), this), 0, 0);
  controls->addWidget(d_->lambda, 0, 1);
  controls->addWidget(d_->lambda_label, 0, 2);

  d_->budget = new QSlider(Qt::Horizontal, this);
  d_->budget->setRange(1, 256);
  d_->budget->setValue(64);
  d_->budget->setPageStep(8);
  d_->budget->setToolTip(tr("Budget C: the mean feature dimension per head"));
  d_->budget_box = new QSpinBox(this);
  d_->budget_box->setRange(1, 256);
  d_->budget_box->setValue(64);
  d_->budget_box->setToolTip(d_->budget->toolTip());
  controls->addWidget(new QLabel(tr("Budget"), this), 1, 0);
  controls->addWidget(d_->budget, 1, 1);
  controls->addWidget(d_->budget_box, 1, 2);

  d_->strategy = new QComboBox(this);
  for (const std::string& n : alloc_strategy_names()) d_->strategy->addItem(QString::fromStdString(n));
  d_->strategy->setCurrentIndex(int(AllocStrategy::Dof));
  d_->strategy->setItemData(0, tr("M = C in every layer"), Qt::ToolTipRole);
  d_->strategy->setItemData(1, tr("Algorithm 1: M proportional to the layer's DoF (max over heads)"), Qt::ToolTipRole);
  d_->strategy->setItemData(2, tr("dof, each layer clamped to at most the head dimension d (cost may fall below C)"), Qt::ToolTipRole);
  d_->strategy->setItemData(3, tr("the same total budget spread over the heads by their own DoF"), Qt::ToolTipRole);
  d_->strategy->setToolTip(tr("Allocation strategy"));
  controls->addWidget(new QLabel(tr("Strategy"), this), 0, 3);
  controls->addWidget(d_->strategy, 0, 4);

  d_->table_button = new QToolButton(this);
  d_->table_button->setText(tr("Table…"));
  d_->table_button->setToolTip(tr("Export Table 1 or Table 2 as Markdown, LaTeX or CSV"));
  d_->table_button->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(d_->table_button);
  menu->addAction(tr("DoF per head (Table 2)…"), d_, [this] { d_->table_dialog(DofTable::DofGrid); });
  menu->addAction(tr("Feature dimension per layer (Table 1)…"), d_, [this] { d_->table_dialog(DofTable::Allocation); });
  d_->head_dims_action = menu->addAction(tr("Feature dimension per head (per-head)…"), d_, [this] { d_->table_dialog(DofTable::HeadDims); });
  d_->head_dims_action->setEnabled(false);
  d_->table_button->setMenu(menu);
  controls->addWidget(d_->table_button, 1, 4, Qt::AlignLeft);
  d_->state_share = new QDoubleSpinBox(this);
  d_->state_share->setRange(0, 1);
  d_->state_share->setDecimals(2);
  d_->state_share->setSingleStep(0.05);
  d_->state_share->setSpecialValueText(tr("off"));
  d_->state_share->setToolTip(tr("Keep heads exact under a state budget: the share of the original's key-value cache (at the "
                                 "capture's length) the converted model may keep per sequence. The heads with the largest DoF "
                                 "stay softmax while it fits (S in the grid); the rest are map heads, hybrid with the Train "
                                 "form's window. Linearize from the DoF view takes it as --state-share."));
  controls->addWidget(new QLabel(tr("Keep exact"), this), 2, 0);
  auto* share_row = new QHBoxLayout;
  share_row->addWidget(d_->state_share);
  share_row->addWidget(new QLabel(tr("of the key-value cache (state share)"), this));
  share_row->addStretch(1);
  controls->addLayout(share_row, 2, 1, 1, 2);
  controls->setColumnStretch(1, 1);
  layout->addLayout(controls);

  d_->grid_panel = new DofGridPanel(this);
  d_->head_table = new DofHeadTable(this);
  d_->grid_tabs = new QTabWidget(this);
  d_->grid_tabs->setDocumentMode(true);
  d_->grid_tabs->addTab(d_->grid_panel, tr("Heatmap"));
  d_->grid_tabs->addTab(d_->head_table, tr("Table (sortable, per head)"));
  d_->grid_tabs->setTabToolTip(1, tr("Every head's DoF, bounds, convergence and M; click a header to sort"));
  d_->spectrum_panel = new DofSpectrumPanel(this);
  d_->curve_panel = new DofCurvePanel(this);
  d_->alloc_panel = new DofAllocationPanel(this);
  auto* grid = new QGridLayout;
  grid->setSpacing(6);
  grid->addWidget(d_->grid_tabs, 0, 0);
  grid->addWidget(d_->alloc_panel, 0, 1);
  grid->addWidget(d_->spectrum_panel, 1, 0);
  grid->addWidget(d_->curve_panel, 1, 1);
  layout->addLayout(grid, 1);
  connect(d_->grid_panel, &DofGridPanel::cellClicked, this, [this](int layer, int head) {
    select(layer, head);
    emit headSelected(layer, head);
  });
  connect(d_->head_table, &DofHeadTable::headSelected, this, [this](int layer, int head) {
    select(layer, head);
    emit headSelected(layer, head);
  });
  d_->clear();

  auto emit_settings = [this] {
    if (!d_->quiet) emit settingsChanged(lambda(), budget(), strategy());
  };
  connect(d_->lambda, &QSlider::valueChanged, this, [this, emit_settings](int pos) {
    d_->lambda_label->setText(lambda_label_text(pos));
    emit_settings();
  });
  connect(d_->budget, &QSlider::valueChanged, this, [this, emit_settings](int v) {
    const QSignalBlocker block(d_->budget_box);
    d_->budget_box->setValue(v);
    emit_settings();
  });
  // The box moves the slider, whose valueChanged emits (once).
  connect(d_->budget_box, qOverload<int>(&QSpinBox::valueChanged), this, [this](int v) { d_->budget->setValue(v); });
  connect(d_->state_share, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this](double v) {
    if (!d_->quiet) emit stateShareChanged(v);
  });
  connect(d_->strategy, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, emit_settings](int) {
    d_->head_dims_action->setEnabled(strategy() == AllocStrategy::PerHead);
    emit_settings();
  });
}

void DofView::set_spectra(std::shared_ptr<const DofSpectra> spectra) {
  d_->spectra = std::move(spectra);
  d_->drawn_lambda = NAN;
  if (!d_->spectra) {
    d_->clear();
    return;
  }
  d_->pending.clear();
  const int max_budget = int(std::max<int64_t>(256, 4 * d_->spectra->head_dim));
  {
    // Widening the range keeps the value; narrowing may move it, which is no user action.
    const bool was = d_->quiet;
    d_->quiet = true;
    d_->budget->setMaximum(std::max(max_budget, d_->budget->value()));
    d_->budget_box->setMaximum(d_->budget->maximum());
    d_->quiet = was;
  }
  if (d_->sel_layer >= d_->spectra->num_layers || d_->sel_head >= d_->spectra->num_heads) d_->sel_layer = d_->sel_head = 0;
  d_->spectrum_panel->show_note({});
  d_->curve_panel->show_note({});
  d_->draw_head();
}

void DofView::show_pending(const QString& note) {
  d_->pending = note;
  d_->spectra.reset();
  d_->drawn_lambda = NAN;
  d_->clear();
}

QString DofView::note() const { return d_->grid_panel->note(); }

void DofView::show_state(const DofAllocation& state) {
  d_->state = state;
  d_->has_state = true;
  // A budget or strategy move changes only the allocation: the DoF panels stay as drawn.
  const int S = int(state.head_dof.size());
  const int H = S ? int(state.head_dof.front().size()) : 0;
  const bool reshaped = S != d_->grid_panel->rows() || H != d_->grid_panel->cols();
  d_->head_dims_action->setEnabled(state.allocation.strategy == AllocStrategy::PerHead);
  if (reshaped || state.lambda != d_->drawn_lambda || state.allocation.types != d_->drawn_types) {
    d_->grid_panel->show_state(state);
    d_->grid_panel->select(d_->sel_layer, d_->sel_head);
    d_->spectrum_panel->show_lambda(d_->lambda_shown());
    d_->curve_panel->show_lambda(d_->lambda_shown(), d_->head_dof());
    d_->drawn_lambda = state.lambda;
    d_->drawn_types = state.allocation.types;
  }
  d_->alloc_panel->show_state(state, d_->spectra ? d_->spectra->head_dim : 0);
  d_->head_table->show_state(state);  // its M column follows the budget too
}

void DofView::select(int layer, int head) {
  if (layer < 0 || head < 0) return;
  d_->sel_layer = layer;
  d_->sel_head = head;
  d_->grid_panel->select(layer, head);
  d_->head_table->select(layer, head);
  d_->draw_head();
}

double DofView::lambda() const { return lambda_of_position(d_->lambda->value()); }
int64_t DofView::budget() const { return d_->budget->value(); }
AllocStrategy DofView::strategy() const {
  return parse_alloc_strategy(d_->strategy->currentText().toStdString());
}

void DofView::set_controls(double lambda, int64_t budget, AllocStrategy strategy) {
  const bool was = d_->quiet;
  d_->quiet = true;
  d_->lambda->setValue(position_of_lambda(lambda));
  const int b = int(std::clamp<int64_t>(budget, 1, 1 << 20));
  if (b > d_->budget->maximum()) {
    d_->budget->setMaximum(b);
    d_->budget_box->setMaximum(b);
  }
  d_->budget->setValue(b);
  d_->strategy->setCurrentIndex(int(strategy));
  d_->quiet = was;
}

void DofView::set_state_share(double share) {
  const bool was = d_->quiet;
  d_->quiet = true;
  d_->state_share->setValue(share);
  d_->quiet = was;
}
double DofView::state_share() const { return d_->state_share->value(); }
QDoubleSpinBox* DofView::state_share_box() const { return d_->state_share; }

void DofView::set_commands(const QString& dof_command, const QString& allocate_command) {
  d_->grid_panel->set_command(dof_command);
  d_->spectrum_panel->set_command(dof_command);
  d_->curve_panel->set_command(dof_command);
  d_->alloc_panel->set_command(allocate_command);
}

QSlider* DofView::lambda_slider() const { return d_->lambda; }
QSlider* DofView::budget_slider() const { return d_->budget; }
QComboBox* DofView::strategy_box() const { return d_->strategy; }
QLabel* DofView::lambda_label() const { return d_->lambda_label; }
QSpinBox* DofView::budget_box() const { return d_->budget_box; }
DofHeadTable* DofView::head_table() const { return d_->head_table; }
QTabWidget* DofView::grid_tabs() const { return d_->grid_tabs; }
std::vector<PlotPanel*> DofView::panels() const {
  return {d_->grid_panel, d_->spectrum_panel, d_->curve_panel, d_->alloc_panel};
}

std::vector<double> DofView::drawn_layer_dims() const { return d_->alloc_panel->drawn_layer_dims(); }

QString DofView::mean_cost_text() const { return d_->alloc_panel->mean_cost_text(); }
QString DofView::allocation_caption() const { return d_->alloc_panel->caption(); }

QString DofView::cell_text(int layer, int head) const { return d_->grid_panel->cell_text(layer, head); }

int DofView::selected_layer() const { return d_->sel_layer; }
int DofView::selected_head() const { return d_->sel_head; }

Table DofView::table(DofTable which) const {
  if (!d_->has_state) return Table{};
  switch (which) {
    case DofTable::DofGrid: return dof_grid_table(d_->state.head_dof, d_->state.lambda, d_->state.convergence);
    case DofTable::Allocation: return allocation_table(d_->model_name(), {d_->state.allocation});
    case DofTable::HeadDims: return head_dims_table(d_->state.allocation);
  }
  return Table{};
}

void DofView::export_table(DofTable which, const QString& path) const {
  const std::string p = path.toStdString();
  if (!d_->has_state) fail(p, "no DoF or allocation is shown yet");
  const Table t = table(which);
  if (path.endsWith(".csv", Qt::CaseInsensitive)) write_text_file(p, to_csv(t));
  else if (path.endsWith(".md", Qt::CaseInsensitive)) write_text_file(p, to_markdown(t));
  else if (path.endsWith(".tex", Qt::CaseInsensitive)) write_text_file(p, to_latex(t));
  else fail(p, "unknown table format: use .csv, .md or .tex");
}

}  // namespace attnscope::views
