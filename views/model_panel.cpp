#include "model_panel.h"

#include <QCheckBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>
#include <climits>

namespace attnscope::views {

namespace {

// Long paths have no spaces to break at: a zero-width space after each separator lets the label
// wrap them in a narrow dock.
QString breakable_path(const QString& path) {
  QString out = path.toHtmlEscaped();
  out.replace('/', QStringLiteral("/\u200B"));
  return out;
}

// "key: value" lines as a two-column table (keys dimmed); a line without ':' spans both.
QString summary_html(const QString& summary) {
  QString html = QStringLiteral("<table cellspacing='0' cellpadding='1'>");
  for (const QString& line : summary.split('\n', Qt::SkipEmptyParts)) {
    const int colon = line.indexOf(':');
    if (colon < 0) {
      html += QStringLiteral("<tr><td colspan='2'>%1</td></tr>").arg(line.trimmed().toHtmlEscaped());
      continue;
    }
    html += QStringLiteral("<tr><td style='padding-right:8px'>%1</td><td>%2</td></tr>")
                .arg(line.left(colon).trimmed().toHtmlEscaped(), line.mid(colon + 1).trimmed().toHtmlEscaped());
  }
  return html + QStringLiteral("</table>");
}

QSpinBox* spin(int lo, int hi, int value, const QString& tip, QWidget* parent) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  s->setToolTip(tip);
  s->setAccelerated(true);
  return s;
}

}  // namespace

ModelPanel::ModelPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setFrameShape(QFrame::NoFrame);
  outer->addWidget(scroll);
  auto* body = new QWidget(scroll);
  scroll->setWidget(body);
  auto* layout = new QVBoxLayout(body);
  layout->setContentsMargins(6, 6, 6, 6);

  // Model
  auto* model_box = new QGroupBox(tr("Model"), body);
  auto* ml = new QVBoxLayout(model_box);
  path_ = new QLabel(tr("<i>no model open</i>"), model_box);
  path_->setWordWrap(true);
  path_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  ml->addWidget(path_);
  summary_ = new QLabel(model_box);
  summary_->setTextFormat(Qt::RichText);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  ml->addWidget(summary_);
  auto* open = new QGridLayout;
  open->setSpacing(4);
  auto* folder = new QPushButton(tr("Folder…"), model_box);
  folder->setToolTip(tr("A Hugging Face model folder (config.json, *.safetensors, tokenizer)"));
  auto* llama = new QPushButton(tr("llama2.c file…"), model_box);
  llama->setToolTip(tr("A llama2.c checkpoint (.bin), its tokenizer.bin beside it"));
  auto* hf = new QPushButton(tr("Hugging Face name…"), model_box);
  hf->setToolTip(tr("A model name, ORG/NAME, found in the Hugging Face cache ($HF_HOME or ~/.cache/huggingface)"));
  open->addWidget(folder, 0, 0);
  open->addWidget(llama, 0, 1);
  open->addWidget(hf, 1, 0, 1, 2);
  ml->addLayout(open);
  layout->addWidget(model_box);
  connect(folder, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a model folder"), model_path_);
    if (!dir.isEmpty()) emit openModelRequested(dir);
  });
  connect(llama, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Open a llama2.c checkpoint"), model_path_,
                                                      tr("llama2.c checkpoint (*.bin);;All files (*)"));
    if (!file.isEmpty()) emit openModelRequested(file);
  });
  connect(hf, &QPushButton::clicked, this, [this] {
    bool ok = false;
    const QString name = QInputDialog::getText(this, tr("Open a Hugging Face model"),
                                               tr("Model name in the Hugging Face cache (ORG/NAME):"), QLineEdit::Normal,
                                               QString(), &ok)
                             .trimmed();
    if (ok && !name.isEmpty()) emit openModelRequested(name);
  });

  // Text
  auto* text_box = new QGroupBox(tr("Text"), body);
  auto* tl = new QVBoxLayout(text_box);
  files_ = new QListWidget(text_box);
  files_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  files_->setMaximumHeight(96);
  files_->setToolTip(tr("Text files (.txt: one document each; .jsonl: the \"text\" field of each line)"));
  tl->addWidget(files_);
  auto* fb = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add…"), text_box);
  auto* remove = new QPushButton(tr("Remove"), text_box);
  fb->addWidget(add);
  fb->addWidget(remove);
  fb->addStretch(1);
  tl->addLayout(fb);
  editor_ = new QPlainTextEdit(text_box);
  editor_->setPlaceholderText(tr("Type or paste text here: it is used when no file is listed above."));
  editor_->setMinimumHeight(80);
  // It takes the height left over rather than asking for its large default, so the panel fits
  // a dock without scrolling.
  editor_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Ignored);
  tl->addWidget(editor_, 1);
  layout->addWidget(text_box, 1);
  connect(add, &QPushButton::clicked, this, &ModelPanel::add_files);
  connect(remove, &QPushButton::clicked, this, &ModelPanel::remove_files);

  // Capture
  auto* cap_box = new QGroupBox(tr("Capture"), body);
  auto* cl = new QVBoxLayout(cap_box);
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  num_seqs_ = spin(1, 4096, base_.num_seqs, tr("T: how many windows of text are run through the model"), cap_box);
  seq_len_ = spin(2, 4096, base_.seq_len, tr("L: tokens per window (at most the model's context length)"), cap_box);
  seed_ = spin(0, INT_MAX, int(base_.seed), tr("Seed of the shuffle that picks the windows: the same seed gives the same windows"), cap_box);
  form->addRow(tr("Windows T"), num_seqs_);
  form->addRow(tr("Tokens L"), seq_len_);
  form->addRow(tr("Seed"), seed_);
  cl->addLayout(form);
  pre_rope_ = new QCheckBox(tr("Queries and keys before RoPE"), cap_box);
  pre_rope_->setToolTip(tr("Capture q and k before the rotary position embedding. Off (the default): after RoPE, "
                           "which is what attention sees. Models without RoPE are not affected."));
  cl->addWidget(pre_rope_);
  capture_note_ = new QLabel(cap_box);
  capture_note_->setWordWrap(true);
  capture_note_->setStyleSheet("color: #8a5a00;");  // amber: worth reading, not an error
  capture_note_->hide();
  cl->addWidget(capture_note_);
  capture_ = new QPushButton(tr("Capture"), this);
  capture_->setToolTip(tr("Run the model over the text and keep every head's queries, keys and values (in the background)"));
  capture_->setMinimumHeight(36);
  QFont bf = capture_->font();
  bf.setBold(true);
  bf.setPointSizeF(bf.pointSizeF() * 1.15);
  capture_->setFont(bf);
  capture_->setDefault(true);
  layout->addWidget(cap_box);
  // Below the scrolling part: the button is in sight however short the dock.
  auto* bottom = new QHBoxLayout;
  bottom->setContentsMargins(6, 4, 6, 6);
  bottom->addWidget(capture_);
  outer->addLayout(bottom);
  connect(capture_, &QPushButton::clicked, this, &ModelPanel::captureRequested);

  setMinimumWidth(260);
}

void ModelPanel::set_model(const QString& path, const QString& summary) {
  model_path_ = path;
  summary_raw_ = summary;
  const QString name = QFileInfo(path).fileName().isEmpty() ? path : QFileInfo(path).fileName();
  path_->setText(QStringLiteral("<b>%1</b><br><small>%2</small>").arg(name.toHtmlEscaped(), breakable_path(path)));
  path_->setToolTip(path);
  summary_->setText(summary_html(summary));
}

QString ModelPanel::summary_text() const { return summary_raw_; }

void ModelPanel::set_texts(const QStringList& files, const QString& text) {
  files_->clear();
  for (const QString& f : files) {
    auto* item = new QListWidgetItem(QFileInfo(f).fileName(), files_);
    item->setData(Qt::UserRole, f);
    item->setToolTip(f);
  }
  editor_->setPlainText(text);
}

QStringList ModelPanel::text_files() const {
  QStringList out;
  for (int i = 0; i < files_->count(); ++i) out << files_->item(i)->data(Qt::UserRole).toString();
  return out;
}

QString ModelPanel::text() const { return editor_->toPlainText(); }

CaptureOptions ModelPanel::capture_options() const {
  CaptureOptions o = base_;
  o.num_seqs = num_seqs_->value();
  o.seq_len = seq_len_->value();
  o.seed = uint64_t(seed_->value());
  o.pre_rope = pre_rope_->isChecked();
  return o;
}

void ModelPanel::set_capture_options(const CaptureOptions& o) {
  base_ = o;
  num_seqs_->setValue(o.num_seqs);
  seq_len_->setValue(o.seq_len);
  seed_->setValue(int(std::min<uint64_t>(o.seed, uint64_t(INT_MAX))));
  pre_rope_->setChecked(o.pre_rope);
}

void ModelPanel::set_max_seq_len(int n_ctx) {
  seq_len_->setMaximum(std::max(2, n_ctx));  // QSpinBox clamps the value to it
  seq_len_->setToolTip(tr("L: tokens per window, at most the model's context length (%1)").arg(n_ctx));
}

void ModelPanel::set_busy(bool busy) {
  capture_->setEnabled(!busy);
  capture_->setText(busy ? tr("Capturing…") : tr("Capture"));
}

void ModelPanel::set_capture_note(const QString& note) {
  capture_note_->setText(note);
  capture_note_->setVisible(!note.isEmpty());
}

QString ModelPanel::capture_note() const { return capture_note_->text(); }

void ModelPanel::add_files() {
  const QStringList picked = QFileDialog::getOpenFileNames(this, tr("Add text files"), QString(),
                                                           tr("Text (*.txt *.jsonl);;All files (*)"));
  if (!picked.isEmpty()) emit addTextFilesRequested(picked);  // the window checks and lists them
}

void ModelPanel::remove_files() {
  const auto selected = files_->selectedItems();
  if (selected.isEmpty()) return;
  for (QListWidgetItem* item : selected) delete item;
  emit textFilesChanged(text_files());
}

}  // namespace attnscope::views
