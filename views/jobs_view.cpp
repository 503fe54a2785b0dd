#include "jobs_view.h"

#include <QApplication>
#include <QClipboard>
#include <QEvent>
#include <QFontDatabase>
#include <QHeaderView>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTableWidget>
#include <QToolButton>
#include <QVBoxLayout>
#include <cmath>

#include "plot_style.h"

namespace attnscope::views {

namespace {

// The progress column: a bar painted from the cell's fraction, no widget per row, so a list of
// many training jobs stays light.
class ProgressDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    const QVariant f = index.data(JobsView::FractionRole);
    if (!f.isValid()) return QStyledItemDelegate::paint(painter, option, index);
    // Selection background first, then the bar inset in the cell.
    QStyleOptionViewItem bg = option;
    initStyleOption(&bg, index);
    bg.text.clear();
    const QWidget* w = option.widget;
    QStyle* style = w ? w->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &bg, painter, w);
    QStyleOptionProgressBar bar;
    bar.rect = option.rect.adjusted(3, 3, -3, -3);
    bar.minimum = 0;
    bar.maximum = 1000;
    bar.progress = int(std::lround(std::clamp(f.toDouble(), 0.0, 1.0) * 1000));
    bar.text = index.data(Qt::DisplayRole).toString();
    bar.textVisible = true;
    bar.textAlignment = Qt::AlignCenter;
    bar.state = option.state | QStyle::State_Horizontal;
    bar.palette = option.palette;
    style->drawControl(QStyle::CE_ProgressBar, &bar, painter, w);
  }
};

QColor error_color(const QPalette& p) { return is_dark(p) ? QColor(255, 120, 110) : QColor(190, 0, 0); }

QString progress_text(const JobStatus& j) {
  const QString pct = QString::number(int(std::floor(std::clamp(j.fraction, 0.0, 1.0) * 100))) + "%";
  switch (j.state) {
    case JobState::Queued: return QObject::tr("queued");
    case JobState::Succeeded: return QStringLiteral("100%");
    case JobState::Failed: return pct + QObject::tr(" (failed)");
    case JobState::Cancelled: return pct + QObject::tr(" (cancelled)");
    case JobState::Running: break;
  }
  QString text = j.step.empty() ? pct : pct + QStringLiteral(" · ") + QString::fromStdString(j.step);
  if (j.seconds_left >= 0) text += QStringLiteral(" · ") + QString::fromStdString(time_left_text(j.seconds_left));
  return text;
}

// Sets the item's text only when it changed: no repaint, no flicker for unchanged cells.
void set_text(QTableWidgetItem* item, const QString& text) {
  if (item->text() != text) item->setText(text);
}

}  // namespace

QString JobsView::elapsed_text(double s) {
  if (!(s >= 0) || !std::isfinite(s)) s = 0;
  if (s < 60) return QString::number(s, 'f', 1) + " s";
  const long total = long(s);
  if (s < 3600) return QStringLiteral("%1 min %2 s").arg(total / 60).arg(total % 60, 2, 10, QChar('0'));
  return QStringLiteral("%1 h %2 min").arg(total / 3600).arg((total % 3600) / 60, 2, 10, QChar('0'));
}

JobsView::JobsView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  auto* split = new QSplitter(Qt::Vertical, this);
  table_ = new QTableWidget(0, ColumnCount, split);
  table_->setHorizontalHeaderLabels({tr("Kind"), tr("Job"), tr("State"), tr("Progress"), tr("Elapsed"), QString()});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->setVisible(false);
  table_->setAlternatingRowColors(true);
  table_->setWordWrap(false);
  table_->setItemDelegateForColumn(ProgressColumn, new ProgressDelegate(table_));
  QHeaderView* h = table_->horizontalHeader();
  h->setSectionResizeMode(KindColumn, QHeaderView::ResizeToContents);
  h->setSectionResizeMode(TitleColumn, QHeaderView::Stretch);
  h->setSectionResizeMode(StateColumn, QHeaderView::ResizeToContents);
  h->setSectionResizeMode(ProgressColumn, QHeaderView::Interactive);
  h->setSectionResizeMode(ElapsedColumn, QHeaderView::ResizeToContents);
  h->setSectionResizeMode(CancelColumn, QHeaderView::ResizeToContents);
  // Wide enough for "27% · layer 9/32 head 24/32" (a 32 x 32 model's spectra).
  table_->setColumnWidth(ProgressColumn, table_->fontMetrics().horizontalAdvance(QStringLiteral("100% · layer 32/32 head 32/32")) + 24);
  table_->setToolTip(tr("Double-click a finished job to open its results"));

  auto* bottom = new QWidget(split);
  auto* bl = new QVBoxLayout(bottom);
  bl->setContentsMargins(0, 4, 0, 0);
  bl->setSpacing(2);
  log_title_ = new QLabel(tr("Log"), bottom);
  log_title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  log_title_->setWordWrap(true);
  bl->addWidget(log_title_);
  // The job's command line: what reproduces it without the window (a script, a cluster job).
  auto* command_row = new QHBoxLayout;
  command_row->setSpacing(4);
  auto* command_label = new QLabel(tr("Command:"), bottom);
  command_label->setToolTip(tr("The attnscope command line that does the same work headless"));
  command_row->addWidget(command_label);
  command_ = new QLineEdit(bottom);
  command_->setObjectName("job_command");
  command_->setReadOnly(true);
  command_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  command_->setPlaceholderText(tr("this job has no command line"));
  command_label->setBuddy(command_);
  command_row->addWidget(command_, 1);
  copy_command_ = new QToolButton(bottom);
  copy_command_->setObjectName("copy_job_command");
  copy_command_->setText(tr("Copy"));
  copy_command_->setToolTip(tr("Copy the command line to the clipboard"));
  copy_command_->setEnabled(false);
  connect(copy_command_, &QToolButton::clicked, this, [this] {
    if (!command_->text().isEmpty()) QApplication::clipboard()->setText(command_->text());
  });
  command_row->addWidget(copy_command_);
  bl->addLayout(command_row);
  log_ = new QPlainTextEdit(bottom);
  log_->setReadOnly(true);
  log_->setLineWrapMode(QPlainTextEdit::NoWrap);
  log_->setMaximumBlockCount(100000);  // a long training log keeps its newest lines
  QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  log_->setFont(mono);
  log_->setPlaceholderText(tr("Select a job to see its log"));
  bl->addWidget(log_, 1);
  split->addWidget(table_);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(split);

  connect(table_, &QTableWidget::itemSelectionChanged, this, [this] {
    if (!selecting_) follow_newest_ = false;  // the user picked a job: keep it
    update_log();
  });
  connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    const QTableWidgetItem* item = table_->item(row, KindColumn);
    if (!item) return;
    const JobStatus* j = find_job(item->data(IdRole).toInt());
    // Only a job that succeeded has results to open.
    if (j && j->state == JobState::Succeeded) emit openRequested(j->id);
  });
}

const JobStatus* JobsView::find_job(int id) const {
  for (const JobStatus& j : jobs_)
    if (j.id == id) return &j;
  return nullptr;
}

int JobsView::selected_job() const {
  const auto rows = table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return 0;
  const QTableWidgetItem* item = table_->item(rows.front().row(), KindColumn);
  return item ? item->data(IdRole).toInt() : 0;
}

QString JobsView::log_text() const { return log_->toPlainText(); }
QString JobsView::log_title() const { return log_title_->text(); }
QString JobsView::command_text() const { return command_->text(); }

void JobsView::set_jobs(const std::vector<JobStatus>& jobs) {
  const int selected = selected_job();
  // Rows are keyed by job id. The usual update keeps every row and appends new jobs; anything else
  // (a job removed or reordered) rebuilds the rows and restores the selection.
  bool prefix = int(jobs.size()) >= table_->rowCount();
  for (int r = 0; prefix && r < table_->rowCount(); ++r)
    prefix = table_->item(r, KindColumn)->data(IdRole).toInt() == jobs[r].id;
  jobs_ = jobs;
  {
    const QSignalBlocker block(table_);
    if (!prefix) table_->setRowCount(0);
    const int old_rows = table_->rowCount();
    table_->setRowCount(int(jobs_.size()));
    for (int r = 0; r < int(jobs_.size()); ++r) {
      if (r >= old_rows)
        for (int c = 0; c < ColumnCount; ++c) table_->setItem(r, c, new QTableWidgetItem);
      fill_row(r, jobs_[r]);
    }
    if (!prefix && selected)
      for (int r = 0; r < int(jobs_.size()); ++r)
        if (jobs_[r].id == selected) table_->selectRow(r);
  }
  for (auto it = cancel_clicked_.begin(); it != cancel_clicked_.end();) {
    const JobStatus* j = find_job(*it);
    it = (!j || j->finished()) ? cancel_clicked_.erase(it) : std::next(it);
  }
  // Nothing chosen by the user: follow the newest job, so its log is what one sees.
  if ((follow_newest_ || !selected_job()) && !jobs_.empty() && selected_job() != jobs_.back().id) {
    selecting_ = true;
    table_->selectRow(int(jobs_.size()) - 1);
    selecting_ = false;
  }
  update_log();
}

void JobsView::fill_row(int r, const JobStatus& j) {
  const QString error = QString::fromStdString(j.error);
  const bool failed = j.state == JobState::Failed;
  QTableWidgetItem* kind = table_->item(r, KindColumn);
  kind->setData(IdRole, j.id);
  set_text(kind, QString::fromLatin1(job_kind_name(j.kind)));
  QTableWidgetItem* title = table_->item(r, TitleColumn);
  set_text(title, QString::fromStdString(j.title));
  QTableWidgetItem* state = table_->item(r, StateColumn);
  set_text(state, QString::fromLatin1(job_state_name(j.state)));
  QTableWidgetItem* progress = table_->item(r, ProgressColumn);
  set_text(progress, progress_text(j));
  const double fraction = j.state == JobState::Succeeded ? 1.0 : std::clamp(j.fraction, 0.0, 1.0);
  if (progress->data(FractionRole).toDouble() != fraction || !progress->data(FractionRole).isValid())
    progress->setData(FractionRole, fraction);
  set_text(table_->item(r, ElapsedColumn), elapsed_text(j.elapsed_s));
  table_->item(r, ElapsedColumn)->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);

  // A failed job reads red in every cell, its message in the tooltip; others tell the command.
  const QString tip = failed ? tr("failed: %1").arg(error)
                             : (j.command.empty() ? QString() : tr("same work headless:\n%1").arg(QString::fromStdString(j.command)));
  for (int c = 0; c < CancelColumn; ++c) {
    QTableWidgetItem* item = table_->item(r, c);
    if (failed) item->setForeground(error_color(palette()));
    else if (item->data(Qt::ForegroundRole).isValid()) item->setData(Qt::ForegroundRole, QVariant());
    if (item->toolTip() != tip) item->setToolTip(tip);
  }
  if (failed) {
    QFont f = state->font();
    f.setBold(true);
    state->setFont(f);
  }

  // Cancel: a button while the job can still stop.
  auto* button = qobject_cast<QToolButton*>(table_->cellWidget(r, CancelColumn));
  if (j.finished()) {
    if (button) table_->removeCellWidget(r, CancelColumn);
    return;
  }
  if (!button || button->property("job").toInt() != j.id) {
    button = new QToolButton;
    button->setText(tr("Cancel"));
    button->setToolTip(tr("Stop this job at its next step"));
    button->setAutoRaise(false);
    button->setProperty("job", j.id);
    const int id = j.id;
    connect(button, &QToolButton::clicked, this, [this, id, button] {
      cancel_clicked_.insert(id);
      button->setEnabled(false);
      button->setText(tr("Cancelling…"));
      emit cancelRequested(id);
    });
    table_->setCellWidget(r, CancelColumn, button);
  }
  const bool asked = cancel_clicked_.count(j.id) > 0;
  button->setEnabled(!asked);
  button->setText(asked ? tr("Cancelling…") : tr("Cancel"));
}

void JobsView::update_log() {
  const int id = selected_job();
  const JobStatus* j = find_job(id);
  if (!j) {
    log_job_ = 0;
    log_lines_ = 0;
    log_->clear();
    log_title_->setText(tr("Log"));
    log_title_->setStyleSheet(QString());
    command_->clear();
    copy_command_->setEnabled(false);
    return;
  }
  const QString command = QString::fromStdString(j->command);
  if (command_->text() != command) {
    command_->setText(command);
    command_->setCursorPosition(0);  // the start of a long command: "attnscope <verb> ..."
    command_->setToolTip(command);
  }
  copy_command_->setEnabled(!command.isEmpty());
  if (id != log_job_ || j->log.size() < log_lines_) {
    QString all;
    for (const std::string& line : j->log) all += QString::fromStdString(line) + '\n';
    all.chop(1);
    log_->setPlainText(all);
    log_->verticalScrollBar()->setValue(log_->verticalScrollBar()->maximum());
    log_job_ = id;
  } else {
    // Only the new lines: appendPlainText keeps the view at the end when it was there (follows the
    // log) and leaves it where the reader scrolled otherwise.
    for (size_t i = log_lines_; i < j->log.size(); ++i) log_->appendPlainText(QString::fromStdString(j->log[i]));
  }
  log_lines_ = j->log.size();
  QString title = tr("Log of #%1 %2: %3").arg(j->id).arg(QString::fromLatin1(job_kind_name(j->kind)), QString::fromStdString(j->title));
  if (j->state == JobState::Failed) title += tr(" — failed: %1").arg(QString::fromStdString(j->error));
  log_title_->setText(title);
  if (j->state == JobState::Failed) {
    QPalette p = log_title_->palette();
    p.setColor(QPalette::WindowText, error_color(palette()));
    log_title_->setPalette(p);
  } else {
    log_title_->setPalette(palette());
  }
}

void JobsView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) apply_palette();
}

void JobsView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  apply_palette();
}

// The red of failed rows and of a failed job's log title follows the palette.
void JobsView::apply_palette() {
  const QSignalBlocker block(table_);
  for (int r = 0; r < int(jobs_.size()) && r < table_->rowCount(); ++r) fill_row(r, jobs_[r]);
  update_log();  // the same job: no new lines, the title in the new colours
}

}  // namespace attnscope::views
