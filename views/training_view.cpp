#include "training_view.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <optional>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/base/text_file.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

void set_items(QComboBox* box, const QStringList& items) {
  const QString current = box->currentText();
  box->clear();
  box->addItems(items);
  const int i = box->findText(current);
  if (i >= 0) box->setCurrentIndex(i);
}

void select_or_add(QComboBox* box, const QString& text) {
  int i = box->findText(text);
  if (i < 0) {
    box->addItem(text);
    i = box->count() - 1;
  }
  box->setCurrentIndex(i);
}

QStringList q_list(const std::vector<std::string>& names) {
  QStringList out;
  for (const std::string& n : names) out << QString::fromStdString(n);
  return out;
}

std::string full_precision(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

struct TrainingView::Impl {
  TrainingView* view;
  QComboBox *map = nullptr, *loss = nullptr, *schedule = nullptr, *device = nullptr;
  QComboBox *decay = nullptr, *decay_init = nullptr;
  QSpinBox *steps = nullptr, *batch = nullptr, *checkpoint = nullptr, *features = nullptr, *window = nullptr;
  QSpinBox *seq_len = nullptr, *finetune_steps = nullptr, *rank = nullptr;
  QDoubleSpinBox *lr = nullptr, *lr_alpha = nullptr;
  QRadioButton *from_allocation = nullptr, *fixed = nullptr;
  QLabel *allocation_text = nullptr, *run_label = nullptr, *run_dir = nullptr, *caption = nullptr;
  QPushButton *linearize = nullptr, *train = nullptr, *resume = nullptr, *open_run = nullptr;
  QPushButton *open_model = nullptr, *save_model = nullptr;
  QLabel* model_path = nullptr;
  PlotPanel *loss_panel = nullptr, *finetune_panel = nullptr, *kl_panel = nullptr;
  QTableWidget* table_widget = nullptr;
  QToolButton* table_button = nullptr;
  Table table;
  RunMetrics metrics;
  FinetuneMetrics finetune;
  qint64 total_steps = 0, finetune_total = 0;
  QCPItemText* empty_note = nullptr;  // "press Linearize" over an empty plot
  QCPItemText* finetune_note = nullptr;
  std::vector<double> layer_kl;
  // The user's choice of dimensions: the allocation comes back when it is available again (spectra
  // computed after the form was shown) unless the user picked a fixed M.
  bool prefer_allocation = true;
  // The form as last set: its values where the form has no control.
  TrainSettings held;
  // While a run runs its settings are frozen (the form shows what runs); an allocation that arrives
  // meanwhile is applied when it ends.
  bool frozen = false;
  std::optional<std::pair<QString, bool>> pending_allocation;

  std::vector<QWidget*> inputs() const {
    return {map, loss, schedule, device, steps, batch, checkpoint, features, window, decay, decay_init, seq_len,
            finetune_steps, rank, lr, lr_alpha, from_allocation, fixed};
  }

  explicit Impl(TrainingView* v) : view(v) {}

  QDoubleSpinBox* rate_box() const {
    auto* b = new QDoubleSpinBox(view);
    b->setDecimals(5);
    b->setRange(1e-5, opt::lr.range.hi);
    b->setSingleStep(0.01);
    return b;
  }

  QGroupBox* build_form() {
    auto* box = new QGroupBox(tr("Linearize the model"), view);
    auto* form = new QFormLayout(box);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    map = new QComboBox(box);
    map->setObjectName("train_feature_map");
    map->setToolTip(tr("The trainable feature map of every head"));
    form->addRow(tr("Feature map"), map);
    loss = new QComboBox(box);
    loss->setObjectName("train_loss");
    loss->setToolTip(tr("kl: row KL(A ‖ Â); softmax: row cross-entropy; l2: kernel values on sampled pairs;\n"
                        "output: the heads' outputs A V against Â V (LoLCATs); block: each layer's output after "
                        "attention and MLP (paper 003's hidden-state alignment); direct: the whole model's next-token loss"));
    form->addRow(tr("Loss"), loss);

    // Dimensions: the DoF view's allocation (its sliders) or one M for every layer.
    from_allocation = new QRadioButton(tr("DoF view's allocation"), box);
    from_allocation->setObjectName("train_from_allocation");
    fixed = new QRadioButton(tr("Fixed M"), box);
    fixed->setObjectName("train_fixed_m");
    auto* group = new QButtonGroup(box);
    group->addButton(from_allocation);
    group->addButton(fixed);
    from_allocation->setChecked(true);
    allocation_text = new QLabel(tr("(no spectra yet)"), box);
    allocation_text->setWordWrap(true);
    allocation_text->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QFont small = allocation_text->font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    allocation_text->setFont(small);
    features = new QSpinBox(box);
    features->setObjectName("train_features");
    features->setRange(int(opt::features.range.lo), int(opt::features.range.hi));
    features->setValue(64);
    features->setToolTip(tr("Feature dimension M of every head"));
    auto* fixed_row = new QHBoxLayout;
    fixed_row->addWidget(fixed);
    fixed_row->addWidget(features, 1);
    form->addRow(tr("Dimensions"), from_allocation);
    form->addRow(QString(), allocation_text);
    form->addRow(QString(), fixed_row);
    QObject::connect(fixed, &QRadioButton::toggled, features, &QSpinBox::setEnabled);
    QObject::connect(group, &QButtonGroup::buttonClicked, view,
                     [this](QAbstractButton* b) { prefer_allocation = b == from_allocation; });
    features->setEnabled(false);
    window = new QSpinBox(box);
    window->setObjectName("train_window");
    window->setRange(int(opt::window.range.lo), int(opt::window.range.hi));
    window->setSpecialValueText(tr("off"));
    window->setToolTip(tr("Hybrid heads: each query attends its last W keys with softmax weights and older keys "
                          "through the trained map, one normalizer, a balance learned per head.\n"
                          "off (0): plain linear attention. Needs learned-prf or hedgehog, and a loss other than l2."));
    form->addRow(tr("Softmax window"), window);
    decay = new QComboBox(box);
    decay->setObjectName("train_decay");
    decay->addItems(q_list(decay_names()));
    decay->setToolTip(tr("Decayed heads: a constant-memory head that forgets.\nfixed: the map's weight of key j in row i "
                         "times a^(i-j), a = sigmoid(delta) learned per head (RetNet's decay).\ngated: times a_(j+1)...a_i, "
                         "a_t = sigmoid(w.x_t + b) from the layer's input, learned per head (Mamba-2's gate).\nmixer: each head "
                         "the one the Metrics view's mixer panel names for it (none, fixed or gated,\nfrom its mixer distances "
                         "at N = 16 on the capture).\nnone: no decay."));
    form->addRow(tr("Decay"), decay);
    decay_init = new QComboBox(box);
    decay_init->setObjectName("train_decay_init");
    decay_init->addItems(q_list(decay_init_names()));
    decay_init->setToolTip(tr("fit: each head starts at the decay that best matches its captured attention by lag\n"
                              "none: each head starts without decay"));
    form->addRow(tr("Decay start"), decay_init);
    QObject::connect(decay, &QComboBox::currentTextChanged, decay_init,
                     [this](const QString& d) { decay_init->setEnabled(!frozen && d != QLatin1String(decay_name(Decay::None))); });

    steps = new QSpinBox(box);
    steps->setObjectName("train_steps");
    steps->setRange(int(opt::steps.range.lo), int(opt::steps.range.hi));
    form->addRow(tr("Steps"), steps);
    lr = rate_box();
    lr->setObjectName("train_lr");
    lr->setToolTip(tr("Learning rate of z (learned-prf) or W, b (hedgehog, t2r)"));
    form->addRow(tr("Learning rate"), lr);
    lr_alpha = rate_box();
    lr_alpha->setObjectName("train_lr_alpha");
    lr_alpha->setToolTip(tr("Learning rate of alpha (learned-prf)"));
    form->addRow(tr("LR of alpha"), lr_alpha);
    batch = new QSpinBox(box);
    batch->setObjectName("train_batch");
    batch->setRange(int(opt::batch.range.lo), int(opt::batch.range.hi));
    batch->setToolTip(tr("Windows per mini-batch"));
    form->addRow(tr("Batch"), batch);
    schedule = new QComboBox(box);
    schedule->setObjectName("train_schedule");
    schedule->addItems(q_list(lr_schedule_names()));
    form->addRow(tr("Schedule"), schedule);
    checkpoint = new QSpinBox(box);
    checkpoint->setObjectName("train_checkpoint_every");
    checkpoint->setRange(int(opt::checkpoint_every.range.lo), int(opt::checkpoint_every.range.hi));
    checkpoint->setToolTip(tr("Steps between checkpoints: a cancelled or killed run resumes from the last one"));
    form->addRow(tr("Checkpoint every"), checkpoint);
    device = new QComboBox(box);
    device->setObjectName("train_device");
    device->setToolTip(tr("Device of Distill only (Linearize runs on the CPU)"));
    form->addRow(tr("Device"), device);

    // Linearize's own: the length it trains and evaluates at, and stage 2.
    seq_len = new QSpinBox(box);
    seq_len->setObjectName("train_seq_len");
    seq_len->setRange(0, int(opt::seq_len.range.hi));  // 0: the model's context
    seq_len->setSpecialValueText(tr("model's context"));
    seq_len->setToolTip(tr("Linearize: tokens per window for training and the held-out evaluation "
                           "(model's context: its context length, at most 4096)"));
    form->addRow(tr("Sequence length"), seq_len);
    finetune_steps = new QSpinBox(box);
    finetune_steps->setObjectName("train_finetune_steps");
    finetune_steps->setRange(int(opt::finetune_steps.range.lo), int(opt::finetune_steps.range.hi));
    finetune_steps->setSpecialValueText(tr("no finetune"));
    finetune_steps->setToolTip(tr("Linearize, stage 2: steps of the low-rank finetune of the converted model"));
    form->addRow(tr("Finetune steps"), finetune_steps);
    rank = new QSpinBox(box);
    rank->setObjectName("train_rank");
    rank->setRange(int(opt::rank.range.lo), int(opt::rank.range.hi));
    rank->setToolTip(tr("Linearize, stage 2: rank of the adapters on q, k, v and o"));
    form->addRow(tr("Finetune rank"), rank);

    linearize = new QPushButton(tr("Linearize"), box);
    linearize->setObjectName("linearize_button");
    linearize->setDefault(true);
    QFont strong = linearize->font();
    strong.setBold(true);
    linearize->setFont(strong);
    linearize->setToolTip(tr("Capture the text's head at the sequence length, distill the maps (stage 1), convert, "
                             "finetune (stage 2) and measure held-out perplexity on the text's tail, as a job "
                             "(see the Jobs tab); the run goes into the workspace"));
    train = new QPushButton(tr("Distill only"), box);
    train->setObjectName("train_button");
    train->setToolTip(tr("Stage 1 alone on the current capture as a job; no conversion, no evaluation"));
    auto* run_buttons = new QHBoxLayout;
    run_buttons->addWidget(linearize, 2);
    run_buttons->addWidget(train, 1);
    form->addRow(run_buttons);

    auto* sep = new QFrame(box);
    sep->setFrameShape(QFrame::HLine);
    sep->setFrameShadow(QFrame::Sunken);
    form->addRow(sep);
    run_label = new QLabel(tr("No run yet"), box);
    run_label->setObjectName("train_run_status");
    run_label->setWordWrap(true);
    QFont bold = run_label->font();
    bold.setBold(true);
    run_label->setFont(bold);
    form->addRow(run_label);
    run_dir = new QLabel(box);
    run_dir->setWordWrap(true);
    run_dir->setFont(small);
    run_dir->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(run_dir);
    auto* buttons = new QHBoxLayout;
    resume = new QPushButton(tr("Resume"), box);
    resume->setObjectName("resume_button");
    resume->setToolTip(tr("Continue the stopped run from its last checkpoint"));
    resume->setEnabled(false);
    open_run = new QPushButton(tr("Open run…"), box);
    open_run->setObjectName("open_run_button");
    open_run->setToolTip(tr("Show a run folder (one of an earlier session, or an `attnscope linearize` or `distill` run)"));
    buttons->addWidget(open_run);
    buttons->addWidget(resume);
    form->addRow(buttons);
    // The run's final model: where it is, open it here, keep a copy outside the workspace.
    model_path = new QLabel(box);
    model_path->setObjectName("train_final_model");
    model_path->setWordWrap(true);
    model_path->setFont(small);
    model_path->setTextInteractionFlags(Qt::TextSelectableByMouse);
    model_path->hide();
    form->addRow(model_path);
    auto* model_buttons = new QHBoxLayout;
    open_model = new QPushButton(tr("Open model"), box);
    open_model->setObjectName("open_final_model_button");
    open_model->setToolTip(tr("Open the run's final model in the workbench (its heads, metrics and maps)"));
    save_model = new QPushButton(tr("Save model as…"), box);
    save_model->setObjectName("save_final_model_button");
    save_model->setToolTip(tr("Copy the run's final model to a folder of your choice: the workspace is pruned after 14 days"));
    model_buttons->addWidget(open_model);
    model_buttons->addWidget(save_model);
    form->addRow(model_buttons);
    open_model->setEnabled(false);
    save_model->setEnabled(false);
    box->setMinimumWidth(300);
    box->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
    return box;
  }

  void build_loss_panel() {
    loss_panel = new PlotPanel(tr("Stage 1 (distill): training loss per layer (lines), validation KL (dots)"), view);
    QCustomPlot* p = loss_panel->plot();
    p->setMinimumSize(420, 300);
    p->xAxis->setLabel(tr("step"));
    p->yAxis->setLabel(tr("loss (log scale)"));
    p->yAxis->setScaleType(QCPAxis::stLogarithmic);
    p->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    p->yAxis->setNumberFormat("eb");
    p->yAxis->setNumberPrecision(0);
    p->legend->setVisible(false);
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    empty_note = new QCPItemText(p);
    empty_note->position->setType(QCPItemPosition::ptAxisRectRatio);
    empty_note->position->setCoords(0.5, 0.5);
    empty_note->setText(tr("No run yet: the loss of every layer appears here as stage 1 trains"));
    loss_panel->set_csv([this] {
      std::string csv = "series,layer,step,value\n";
      for (const TrainingPoint& t : metrics.training)
        csv += "train_loss," + std::to_string(t.layer) + "," + std::to_string(t.step) + "," + full_precision(t.loss) + "\n";
      for (const ValidationPoint& v : metrics.validation)
        csv += "val_kl," + std::to_string(v.layer) + "," + std::to_string(v.step) + "," + full_precision(v.val_kl) + "\n";
      return csv;
    });
  }

  void build_finetune_panel() {
    finetune_panel = new PlotPanel(tr("Stage 2 (finetune): next-token loss per step (line), held-out loss (dots)"), view);
    QCustomPlot* p = finetune_panel->plot();
    p->setMinimumSize(420, 160);
    p->xAxis->setLabel(tr("step"));
    p->yAxis->setLabel(tr("nats per token"));
    p->legend->setVisible(false);
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    finetune_note = new QCPItemText(p);
    finetune_note->position->setType(QCPItemPosition::ptAxisRectRatio);
    finetune_note->position->setCoords(0.5, 0.5);
    finetune_note->setText(tr("Linearize's stage 2 appears here once stage 1 is done"));
    finetune_panel->set_csv([this] {
      std::string csv = "series,step,value\n";
      for (const FinetuneStep& t : finetune.training)
        csv += "ce," + std::to_string(t.step) + "," + full_precision(t.ce) + "\n";
      for (const FinetuneValidation& v : finetune.validation)
        csv += "val_loss," + std::to_string(v.step) + "," + full_precision(v.val_loss) + "\n";
      return csv;
    });
  }

  void draw_finetune() {
    QCustomPlot* p = finetune_panel->plot();
    p->clearGraphs();
    const bool any = !finetune.training.empty() || !finetune.validation.empty();
    if (any) {
      QCPGraph* ce = p->addGraph();
      ce->setName(tr("stage 2 (finetune) cross-entropy"));
      ce->setPen(QPen(series_color(0), 1.6));
      QCPGraph* val = p->addGraph();
      val->setName(tr("stage 2 (finetune) held-out loss"));
      val->setLineStyle(QCPGraph::lsNone);
      val->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, series_color(1), series_color(1), 7));
      for (const FinetuneStep& t : finetune.training)
        if (std::isfinite(t.ce)) ce->addData(double(t.step), t.ce);
      for (const FinetuneValidation& v : finetune.validation)
        if (std::isfinite(v.val_loss)) val->addData(double(v.step), v.val_loss);
      p->rescaleAxes();
      const QCPRange y = p->yAxis->range();
      const double pad = std::max(0.05 * y.size(), 0.02);
      // Headroom above the curves for the legend (top right), so that it covers no point.
      p->yAxis->setRange(y.lower - pad, y.upper + pad + 0.6 * std::max(y.size(), 0.05));
      const QCPRange x = p->xAxis->range();
      p->xAxis->setRange(0, std::max({x.upper, double(finetune_total), 1.0}));
    }
    p->legend->setVisible(any);
    finetune_note->setVisible(!any);
    p->replot();
  }

  void build_kl_panel() {
    kl_panel = new PlotPanel(tr("Stage 1: KL per layer"), view);
    kl_panel->setToolTip(tr("Stage 1's attention KL per layer, on held-out windows"));
    QCustomPlot* p = kl_panel->plot();
    p->setMinimumSize(260, 200);
    p->xAxis->setLabel(tr("layer"));
    p->yAxis->setLabel(tr("KL (nats)"));
    auto* bars = new QCPBars(p->xAxis, p->yAxis);
    bars->setWidth(0.7);
    QColor fill = series_color(0);
    fill.setAlpha(200);
    bars->setBrush(fill);
    bars->setPen(QPen(series_color(0), 1.2));
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    p->xAxis->setTicker(ticker);
    kl_panel->set_csv([this] {
      std::string csv = "layer,attention_kl\n";
      for (size_t l = 0; l < layer_kl.size(); ++l) csv += std::to_string(l) + "," + full_precision(layer_kl[l]) + "\n";
      return csv;
    });
  }

  void draw_curves() {
    QCustomPlot* p = loss_panel->plot();
    p->clearGraphs();
    // A line and a set of dots per layer; direct training's whole-model loss (kModelLayer) first.
    std::map<int, std::pair<QCPGraph*, QCPGraph*>> graphs;
    for (const TrainingPoint& t : metrics.training) graphs[t.layer];
    for (const ValidationPoint& v : metrics.validation) graphs[v.layer];
    for (auto& [l, g] : graphs) {
      const QColor c = l == kModelLayer ? QColor(128, 128, 128) : series_color(l);  // grey reads on both palettes
      const QString name = l == kModelLayer ? tr("model (next-token loss)") : tr("layer %1").arg(l);
      g.first = p->addGraph();
      g.first->setName(name);
      g.first->setPen(QPen(c, l == kModelLayer ? 2.2 : 1.6));
      g.second = p->addGraph();
      g.second->setName(name + tr(" validation KL"));
      g.second->setLineStyle(QCPGraph::lsNone);
      g.second->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c, c, 7));
      g.second->removeFromLegend();
    }
    // Only positive values can sit on a log axis (every loss here is, but a KL can round to 0).
    for (const TrainingPoint& t : metrics.training)
      if (t.loss > 0 && std::isfinite(t.loss)) graphs[t.layer].first->addData(double(t.step), t.loss);
    for (const ValidationPoint& v : metrics.validation)
      if (v.val_kl > 0 && std::isfinite(v.val_kl)) graphs[v.layer].second->addData(double(v.step), v.val_kl);
    const int layers = int(graphs.size());
    p->legend->setVisible(layers > 0 && layers <= 16);
    empty_note->setVisible(layers == 0);
    if (layers > 0) {
      p->rescaleAxes();
      const QCPRange y = p->yAxis->range();
      if (y.lower > 0) p->yAxis->setRange(y.lower / 1.3, y.upper * 1.3);
      const QCPRange x = p->xAxis->range();
      p->xAxis->setRange(0, std::max({x.upper, double(total_steps), 1.0}));
    }
    p->replot();
  }

  void draw_kl() {
    QCustomPlot* p = kl_panel->plot();
    auto* bars = static_cast<QCPBars*>(p->plottable(0));
    QVector<double> x, y;
    for (size_t l = 0; l < layer_kl.size(); ++l) {
      x << double(l);
      y << layer_kl[l];
    }
    bars->setData(x, y, true);
    p->xAxis->setRange(-0.6, std::max<double>(1.0, double(layer_kl.size())) - 0.4);
    double top = 0;
    for (double v : y)
      if (std::isfinite(v)) top = std::max(top, v);
    p->yAxis->setRange(0, top > 0 ? top * 1.15 : 1.0);
    p->replot();
  }

  void fill_table() {
    table_widget->clear();
    table_widget->setColumnCount(int(table.header.size()));
    table_widget->setRowCount(int(table.rows.size()));
    QStringList header;
    for (const std::string& h : table.header) header << QString::fromStdString(h);
    table_widget->setHorizontalHeaderLabels(header);
    for (int r = 0; r < int(table.rows.size()); ++r)
      for (int c = 0; c < int(table.rows[size_t(r)].size()); ++c) {
        auto* item = new QTableWidgetItem(QString::fromStdString(table.rows[size_t(r)][size_t(c)]));
        if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        table_widget->setItem(r, c, item);
      }
    table_widget->resizeColumnsToContents();
    // Every column in sight: the table takes the width its columns need (the KL bars give way).
    const int need = table_widget->horizontalHeader()->length() + 2 * table_widget->frameWidth() +
                     table_widget->verticalScrollBar()->sizeHint().width();
    table_widget->setMinimumWidth(std::max(360, need));
    table_button->setEnabled(!table.rows.empty());
  }

  void table_dialog() {
    const QString path = QFileDialog::getSaveFileName(view, tr("Export the table"), "heldout_perplexity.md",
                                                      tr("Markdown (*.md);;LaTeX (*.tex);;CSV (*.csv)"));
    if (path.isEmpty()) return;
    try {
      view->export_table(path);
    } catch (const std::exception& e) {
      QMessageBox::critical(view, tr("Export failed"), QString::fromStdString(e.what()));
    }
  }

  static QString tr(const char* s) { return TrainingView::tr(s); }

};

TrainingView::TrainingView(QWidget* parent) : QWidget(parent), d_(new Impl(this)) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  QGroupBox* form = d_->build_form();
  layout->addWidget(form, 0);

  auto* split = new QSplitter(Qt::Vertical, this);
  d_->build_loss_panel();
  split->addWidget(d_->loss_panel);
  d_->build_finetune_panel();
  split->addWidget(d_->finetune_panel);

  auto* bottom = new QWidget(split);
  auto* bl = new QHBoxLayout(bottom);
  bl->setContentsMargins(0, 0, 0, 0);
  auto* table_box = new QWidget(bottom);
  auto* tl = new QVBoxLayout(table_box);
  tl->setContentsMargins(2, 2, 2, 2);
  tl->setSpacing(2);
  auto* head = new QHBoxLayout;
  auto* title = new QLabel(tr("Held-out perplexity by length"), table_box);
  QFont bold = title->font();
  bold.setBold(true);
  title->setFont(bold);
  head->addWidget(title, 1);
  d_->table_button = new QToolButton(table_box);
  d_->table_button->setObjectName("comparison_table_button");
  d_->table_button->setText(tr("Table…"));
  d_->table_button->setToolTip(tr("Export the table as Markdown, LaTeX or CSV"));
  d_->table_button->setEnabled(false);
  connect(d_->table_button, &QToolButton::clicked, this, [this] { d_->table_dialog(); });
  head->addWidget(d_->table_button);
  tl->addLayout(head);
  d_->caption = new QLabel(tr("Linearize a model: its held-out perplexity by length appears here."), table_box);
  d_->caption->setObjectName("comparison_caption");
  d_->caption->setWordWrap(true);
  tl->addWidget(d_->caption);
  d_->table_widget = new QTableWidget(0, 0, table_box);
  d_->table_widget->setObjectName("comparison_table");
  d_->table_widget->setEditTriggers(QAbstractItemView::NoEditTriggers);
  d_->table_widget->verticalHeader()->setVisible(false);
  d_->table_widget->setAlternatingRowColors(true);
  d_->table_widget->horizontalHeader()->setStretchLastSection(true);
  d_->table_widget->setMinimumSize(360, 160);
  // Compact rows: the whole comparison (a dozen rows for a small model) fits without scrolling.
  d_->table_widget->verticalHeader()->setDefaultSectionSize(d_->table_widget->fontMetrics().height() + 6);
  tl->addWidget(d_->table_widget, 1);
  bl->addWidget(table_box, 3);
  d_->build_kl_panel();
  bl->addWidget(d_->kl_panel, 2);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setStretchFactor(2, 2);
  layout->addWidget(split, 1);

  connect(d_->linearize, &QPushButton::clicked, this, &TrainingView::linearizeRequested);
  connect(d_->train, &QPushButton::clicked, this, &TrainingView::trainRequested);
  connect(d_->resume, &QPushButton::clicked, this, &TrainingView::resumeRequested);
  connect(d_->open_run, &QPushButton::clicked, this, &TrainingView::openRunRequested);
  connect(d_->open_model, &QPushButton::clicked, this, &TrainingView::openModelRequested);
  connect(d_->save_model, &QPushButton::clicked, this, &TrainingView::saveModelRequested);
  set_form(TrainSettings{});  // the CLI's defaults (`attnscope linearize`), until a session sets its own
  d_->draw_curves();
  d_->draw_finetune();
  d_->draw_kl();
}

TrainingView::~TrainingView() { delete d_; }

void TrainingView::set_choices(const QStringList& maps, const QStringList& devices) {
  set_items(d_->map, maps);
  set_items(d_->loss, q_list(distill_loss_names()));
  set_items(d_->device, devices);
}

TrainSettings TrainingView::form() const {
  TrainSettings f = d_->held;  // what the form has no control for (stage 2's learning rate, the seed) as it was set
  DistillOptions& s1 = f.linearize.stage1;
  s1.feature_map = d_->map->currentText().toStdString();
  s1.loss = parse_distill_loss(d_->loss->currentText().toStdString());
  s1.steps = d_->steps->value();
  s1.lr = d_->lr->value();
  s1.lr_alpha = d_->lr_alpha->value();
  s1.batch = d_->batch->value();
  s1.schedule = parse_lr_schedule(d_->schedule->currentText().toStdString());
  s1.device = parse_device_name(d_->device->currentText().toStdString());
  s1.checkpoint_every = d_->checkpoint->value();
  f.from_allocation = d_->from_allocation->isChecked();
  s1.features = d_->features->value();
  s1.window = d_->window->value();
  s1.decay = parse_decay(d_->decay->currentText().toStdString());
  s1.decay_init = parse_decay_init(d_->decay_init->currentText().toStdString());
  f.linearize.seq_len = d_->seq_len->value();
  f.linearize.stage2.steps = d_->finetune_steps->value();
  f.linearize.stage2.rank = d_->rank->value();
  return f;
}

void TrainingView::set_form(const TrainSettings& f) {
  d_->held = f;
  const DistillOptions& s1 = f.linearize.stage1;
  const auto spin = [](QSpinBox* box, int64_t v) { box->setValue(int(std::clamp<int64_t>(v, box->minimum(), box->maximum()))); };
  select_or_add(d_->map, QString::fromStdString(s1.feature_map));
  select_or_add(d_->loss, QString::fromLatin1(distill_loss_name(s1.loss)));
  spin(d_->steps, s1.steps);
  d_->lr->setValue(s1.lr);
  d_->lr_alpha->setValue(s1.lr_alpha);
  spin(d_->batch, s1.batch);
  select_or_add(d_->schedule, QString::fromLatin1(lr_schedule_name(s1.schedule)));
  select_or_add(d_->device, QString::fromLatin1(device_name(s1.device)));
  spin(d_->checkpoint, s1.checkpoint_every);
  if (s1.features > 0) spin(d_->features, s1.features);  // 0: no fixed M chosen yet, the box keeps its value
  spin(d_->window, s1.window);
  select_or_add(d_->decay, QString::fromLatin1(decay_name(s1.decay)));
  select_or_add(d_->decay_init, QString::fromLatin1(decay_init_name(s1.decay_init)));
  d_->decay_init->setEnabled(!d_->frozen && s1.decay != Decay::None);
  spin(d_->seq_len, f.linearize.seq_len);
  spin(d_->finetune_steps, f.linearize.stage2.steps);
  spin(d_->rank, f.linearize.stage2.rank);
  d_->prefer_allocation = f.from_allocation;
  if (f.from_allocation && d_->from_allocation->isEnabled()) d_->from_allocation->setChecked(true);
  else d_->fixed->setChecked(true);
}

void TrainingView::set_frozen(bool frozen) {
  if (d_->frozen == frozen) return;
  d_->frozen = frozen;
  for (QWidget* w : d_->inputs()) w->setEnabled(!frozen);
  if (frozen) return;
  d_->decay_init->setEnabled(d_->decay->currentText() != QLatin1String(decay_name(Decay::None)));
  if (d_->pending_allocation) {
    const auto [text, available] = *d_->pending_allocation;
    d_->pending_allocation.reset();
    set_allocation(text, available);
  } else if (d_->allocation_text->property("available").isValid()) {
    d_->from_allocation->setEnabled(d_->allocation_text->property("available").toBool());
  }
}

bool TrainingView::frozen() const { return d_->frozen; }

void TrainingView::set_allocation(const QString& text, bool available) {
  if (d_->frozen) {
    d_->pending_allocation = {text, available};
    return;
  }
  d_->allocation_text->setProperty("available", available);
  d_->allocation_text->setText(text);
  d_->from_allocation->setEnabled(available);
  if (!available) d_->fixed->setChecked(true);
  else if (d_->prefer_allocation) d_->from_allocation->setChecked(true);
}

void TrainingView::set_run(const QString& dir, const QString& status, bool can_linearize, bool can_train, bool can_resume) {
  d_->run_label->setText(status);
  d_->run_dir->setText(dir);
  d_->run_dir->setToolTip(dir);
  d_->linearize->setEnabled(can_linearize);
  d_->train->setEnabled(can_train);
  d_->resume->setEnabled(can_resume);
}

void TrainingView::set_command(const QString& run_command) {
  for (PlotPanel* p : panels()) p->set_command(run_command);
}

void TrainingView::set_curves(const RunMetrics& metrics, qint64 total_steps) {
  d_->metrics = metrics;
  d_->total_steps = total_steps;
  d_->draw_curves();
}

void TrainingView::set_finetune_curves(const FinetuneMetrics& metrics, qint64 total_steps) {
  d_->finetune = metrics;
  d_->finetune_total = total_steps;
  d_->draw_finetune();
}

void TrainingView::set_comparison(const Table& table, const std::vector<double>& layer_kl) {
  d_->table = table;
  d_->caption->setText(table.rows.empty() ? tr("Linearize a model: its held-out perplexity by length appears here.")
                                          : QString::fromStdString(table.caption));
  d_->layer_kl = layer_kl;
  d_->fill_table();
  d_->draw_kl();
}

const Table& TrainingView::table() const { return d_->table; }

void TrainingView::export_table(const QString& path) const {
  const std::string p = path.toStdString();
  if (d_->table.rows.empty()) fail(p, "no table is shown yet: Linearize a model first");
  if (path.endsWith(".csv", Qt::CaseInsensitive)) write_text_file(p, to_csv(d_->table));
  else if (path.endsWith(".md", Qt::CaseInsensitive)) write_text_file(p, to_markdown(d_->table));
  else if (path.endsWith(".tex", Qt::CaseInsensitive)) write_text_file(p, to_latex(d_->table));
  else fail(p, "unknown table format: use .csv, .md or .tex");
}

PlotPanel* TrainingView::loss_panel() const { return d_->loss_panel; }
PlotPanel* TrainingView::finetune_panel() const { return d_->finetune_panel; }
PlotPanel* TrainingView::kl_panel() const { return d_->kl_panel; }
std::vector<PlotPanel*> TrainingView::panels() const { return {d_->loss_panel, d_->finetune_panel, d_->kl_panel}; }
QTableWidget* TrainingView::comparison_table() const { return d_->table_widget; }
QLabel* TrainingView::table_caption() const { return d_->caption; }
QPushButton* TrainingView::linearize_button() const { return d_->linearize; }
QPushButton* TrainingView::train_button() const { return d_->train; }
QPushButton* TrainingView::resume_button() const { return d_->resume; }
QPushButton* TrainingView::open_run_button() const { return d_->open_run; }
QPushButton* TrainingView::open_model_button() const { return d_->open_model; }
QPushButton* TrainingView::save_model_button() const { return d_->save_model; }
QString TrainingView::final_model_text() const { return d_->model_path->text(); }

void TrainingView::set_final_model(const QString& path) {
  d_->model_path->setText(path.isEmpty() ? QString() : tr("Final model: %1").arg(path));
  d_->model_path->setToolTip(path);
  d_->model_path->setVisible(!path.isEmpty());
  d_->open_model->setEnabled(!path.isEmpty());
  d_->save_model->setEnabled(!path.isEmpty());
}
QComboBox* TrainingView::map_box() const { return d_->map; }
QSpinBox* TrainingView::steps_box() const { return d_->steps; }
QSpinBox* TrainingView::features_box() const { return d_->features; }
QSpinBox* TrainingView::window_box() const { return d_->window; }
QSpinBox* TrainingView::seq_len_box() const { return d_->seq_len; }
QSpinBox* TrainingView::finetune_steps_box() const { return d_->finetune_steps; }
QSpinBox* TrainingView::rank_box() const { return d_->rank; }
QRadioButton* TrainingView::allocation_radio() const { return d_->from_allocation; }
QRadioButton* TrainingView::fixed_radio() const { return d_->fixed; }
QLabel* TrainingView::run_label() const { return d_->run_label; }

}  // namespace attnscope::views
