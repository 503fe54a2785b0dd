// File > Workspace…: the captures the window has kept under the cache (core's workspace.h), each
// folder's size, age and contents and the total, with Remove selected, Remove all but the current
// and Open folder. The folder of what the window shows now is marked and never removed.
#pragma once
#include <QDialog>
#include <QString>
#include <QStringList>

class QLabel;
class QPushButton;
class QTableWidget;

namespace attnscope::gui {

class WorkspaceDialog : public QDialog {
  Q_OBJECT
 public:
  // `root`: the workspace; `keep`: folders in use (removed by nothing here).
  WorkspaceDialog(const QString& root, const QStringList& keep, QWidget* parent = nullptr);

  QTableWidget* table() const { return table_; }
  QLabel* total_label() const { return total_; }
  QPushButton* remove_selected_button() const { return remove_selected_; }
  QPushButton* remove_others_button() const { return remove_others_; }
  void refresh();  // lists the folders again

 signals:
  void removed(quint64 bytes);  // folders were removed (bytes freed)
  void failed(const QString& message);

 private:
  void remove(const QStringList& folders);
  bool kept(const QString& folder) const;

  QString root_;
  QStringList keep_;
  QTableWidget* table_;
  QLabel* total_;
  QPushButton *remove_selected_, *remove_others_, *open_;
};

}  // namespace attnscope::gui
