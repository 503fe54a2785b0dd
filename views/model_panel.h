// The model and data panel: which model is open (folder, Hugging Face cache name or llama2.c file)
// and its shape, the sample text (an editor and a file loader), the capture settings (windows T,
// tokens L, seed, queries and keys before or after RoPE) and the Capture button.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>

#include "attnscope/capture/capture.h"

class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QCheckBox;
class QPushButton;
class QListWidget;

namespace attnscope::views {

class ModelPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ModelPanel(QWidget* parent = nullptr);

  // `summary`: lines of "key: value" (architecture, layers, heads, head dim, context, parameters).
  void set_model(const QString& path, const QString& summary);
  void set_texts(const QStringList& files, const QString& text);  // files listed, text in the editor
  QStringList text_files() const;
  QString text() const;  // the editor's content (used when no file is listed)
  CaptureOptions capture_options() const;
  void set_capture_options(const CaptureOptions& options);
  void set_max_seq_len(int n_ctx);  // the model's context length caps L
  void set_busy(bool busy);          // disables Capture while a capture runs
  // A line under the capture settings about the last capture (e.g. "4 windows of 256 tokens: the
  // text is short"); empty hides it.
  void set_capture_note(const QString& note);
  QString capture_note() const;

  QPushButton* capture_button() const { return capture_; }
  QString model_path() const { return model_path_; }
  QString summary_text() const;  // the summary as shown, "key: value" per line
  QSpinBox* num_seqs_box() const { return num_seqs_; }
  QSpinBox* seq_len_box() const { return seq_len_; }
  QSpinBox* seed_box() const { return seed_; }
  QCheckBox* pre_rope_box() const { return pre_rope_; }
  QListWidget* files_list() const { return files_; }
  QPlainTextEdit* editor() const { return editor_; }

 signals:
  void openModelRequested(const QString& spec);  // a folder, a .bin file or an HF cache name
  void textFilesChanged(const QStringList& files);       // a file was removed from the list
  void addTextFilesRequested(const QStringList& files);  // Add… picked these (not yet listed)
  void captureRequested();

 private:
  QLabel *path_, *summary_;
  QListWidget* files_;
  QPlainTextEdit* editor_;
  QSpinBox *num_seqs_, *seq_len_, *seed_;
  QCheckBox* pre_rope_;
  QLabel* capture_note_;
  QPushButton* capture_;
  CaptureOptions base_;  // what the panel does not show (dtype, batch) passes through
  QString model_path_, summary_raw_;

  void add_files();
  void remove_files();
};

}  // namespace attnscope::views
