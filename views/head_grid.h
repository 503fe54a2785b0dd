// The layer x head overview: one small thumbnail of each head's softmax map (head_thumbnails),
// tinted by the value of a chosen metric (entropy, monotonicity, KL, DoF, ...) with the value
// printed under it and a colour legend; click a thumbnail to select that head.
#pragma once
#include <QString>
#include <QWidget>
#include <vector>

#include "attnscope/figure.h"

namespace attnscope::views {

class HeadGrid : public QWidget {
  Q_OBJECT
 public:
  explicit HeadGrid(QWidget* parent = nullptr);

  void set_thumbnails(std::vector<std::vector<Matrix>> thumbnails);  // [S][H], values in [0, 1]
  // [S][H] values of the metric that tints the thumbnails (NaN: unknown, drawn grey).
  void set_metric(const QString& name, std::vector<std::vector<double>> values);
  void select(int layer, int head);  // no signal
  int selected_layer() const { return layer_; }
  int selected_head() const { return head_; }
  QSize sizeHint() const override;

 signals:
  void headSelected(int layer, int head);  // the user clicked a thumbnail

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  std::vector<std::vector<Matrix>> thumbs_;
  std::vector<std::vector<double>> values_;
  QString metric_;
  int layer_ = 0, head_ = 0;
};

}  // namespace attnscope::views
