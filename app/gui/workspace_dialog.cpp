#include "workspace_dialog.h"

#include <QDateTime>
#include <QDesktopServices>
#include <QDir>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QUrl>
#include <QVBoxLayout>

#include "attnscope/workbench/workspace.h"

namespace attnscope::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QString holds(const WorkspaceFolder& f) {
  QStringList parts;
  if (f.capture) parts << QObject::tr("capture");
  if (f.spectra) parts << QObject::tr("spectra");
  if (f.runs) parts << (f.runs == 1 ? QObject::tr("1 run") : QObject::tr("%1 runs").arg(f.runs));
  return parts.isEmpty() ? QStringLiteral("–") : parts.join(", ");
}

QString normal(const QString& p) { return QDir::cleanPath(QDir(p).absolutePath()); }

}  // namespace

WorkspaceDialog::WorkspaceDialog(const QString& root, const QStringList& keep, QWidget* parent)
    : QDialog(parent), root_(root) {
  for (const QString& k : keep)
    if (!k.isEmpty()) keep_ << normal(k);
  setObjectName("workspace_dialog");
  setWindowTitle(tr("Workspace"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Captures, spectra and runs the window keeps under <tt>%1</tt>. A saved session holds its "
                              "own copies, so these are a cache (folders older than 14 days go at start-up).")
                               .arg(root.toHtmlEscaped()),
                           this);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  table_ = new QTableWidget(0, 4, this);
  table_->setObjectName("workspace_table");
  table_->setHorizontalHeaderLabels({tr("folder"), tr("size"), tr("modified"), tr("holds")});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(table_, 1);
  total_ = new QLabel(this);
  total_->setObjectName("workspace_total");
  layout->addWidget(total_);
  auto* buttons = new QHBoxLayout;
  remove_selected_ = new QPushButton(tr("Remove selected"), this);
  remove_others_ = new QPushButton(tr("Remove all but the current"), this);
  open_ = new QPushButton(tr("Open folder"), this);
  auto* close = new QPushButton(tr("Close"), this);
  buttons->addWidget(remove_selected_);
  buttons->addWidget(remove_others_);
  buttons->addWidget(open_);
  buttons->addStretch(1);
  buttons->addWidget(close);
  layout->addLayout(buttons);
  connect(close, &QPushButton::clicked, this, &QDialog::accept);
  connect(open_, &QPushButton::clicked, this, [this] {
    QDir().mkpath(root_);
    QDesktopServices::openUrl(QUrl::fromLocalFile(root_));
  });
  connect(remove_selected_, &QPushButton::clicked, this, [this] {
    QStringList folders;
    for (const QModelIndex& i : table_->selectionModel()->selectedRows()) folders << table_->item(i.row(), 0)->data(Qt::UserRole).toString();
    remove(folders);
  });
  connect(remove_others_, &QPushButton::clicked, this, [this] {
    QStringList folders;
    for (int r = 0; r < table_->rowCount(); ++r) folders << table_->item(r, 0)->data(Qt::UserRole).toString();
    remove(folders);
  });
  connect(table_, &QTableWidget::itemSelectionChanged, this,
          [this] { remove_selected_->setEnabled(!table_->selectionModel()->selectedRows().isEmpty()); });
  resize(760, 420);
  refresh();
}

bool WorkspaceDialog::kept(const QString& folder) const { return keep_.contains(normal(folder)); }

void WorkspaceDialog::refresh() {
  std::vector<WorkspaceFolder> folders;
  try {
    folders = list_workspace(root_.toStdString());
  } catch (const std::exception& e) {
    emit failed(QString::fromUtf8(e.what()));
  }
  table_->setRowCount(int(folders.size()));
  int others = 0;
  for (int r = 0; r < int(folders.size()); ++r) {
    const WorkspaceFolder& f = folders[size_t(r)];
    const bool in_use = kept(q(f.path));
    others += !in_use;
    auto* name = new QTableWidgetItem(QDir(q(f.path)).dirName() + (in_use ? tr("  (in use)") : QString()));
    name->setData(Qt::UserRole, q(f.path));
    name->setToolTip(q(f.path));
    table_->setItem(r, 0, name);
    auto* size = new QTableWidgetItem(q(human_bytes(f.bytes)));
    size->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    table_->setItem(r, 1, size);
    table_->setItem(r, 2, new QTableWidgetItem(QDateTime::fromSecsSinceEpoch(f.modified_s).toString("yyyy-MM-dd HH:mm")));
    table_->setItem(r, 3, new QTableWidgetItem(holds(f)));
  }
  table_->resizeColumnsToContents();
  const QString count = folders.size() == 1 ? tr("1 folder") : tr("%1 folders").arg(folders.size());
  total_->setText(tr("%1, %2 in all").arg(count, q(human_bytes(total_bytes(folders)))));
  remove_selected_->setEnabled(!table_->selectionModel()->selectedRows().isEmpty());
  remove_others_->setEnabled(others > 0);
}

void WorkspaceDialog::remove(const QStringList& folders) {
  quint64 freed = 0;
  try {
    for (const WorkspaceFolder& f : list_workspace(root_.toStdString())) {
      if (!folders.contains(q(f.path)) || kept(q(f.path))) continue;
      remove_workspace_folder(root_.toStdString(), f.path);
      freed += f.bytes;
    }
  } catch (const std::exception& e) {
    emit failed(QString::fromUtf8(e.what()));
  }
  refresh();
  if (freed) emit removed(freed);
}

}  // namespace attnscope::gui

#include "moc_workspace_dialog.cpp"
