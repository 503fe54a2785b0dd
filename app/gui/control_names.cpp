#include "control_names.h"

#include "attnscope/base/error.h"

namespace attnscope::gui {

namespace {

struct Control {
  const char* quantity;
  const char* control;  // tab or panel > the control's label, as the window shows them
};

constexpr Control kControls[] = {
    // The Train tab's form.
    {"feature map", "Train > Feature map"},
    {"loss", "Train > Loss"},
    {"feature dimension", "Train > Dimensions"},
    // Hybrid heads' W: the Train form's (distill's quantity); the heads view's "Softmax window"
    // cannot hold a bad value, and a session's is named by its key.
    {"window", "Train > Softmax window"},
    {"decay", "Train > Decay"},
    {"decay initialization", "Train > Decay start"},
    {"steps", "Train > Steps"},
    {"learning rate", "Train > Learning rate"},
    {"alpha learning rate", "Train > LR of alpha"},
    {"batch", "Train > Batch"},
    {"schedule", "Train > Schedule"},
    {"checkpoint interval", "Train > Checkpoint every"},
    {"device", "Train > Device"},
    // Linearize's stage 2 (its "sequence length" is the capture's quantity too: named below).
    {"finetune steps", "Train > Finetune steps"},
    {"rank", "Train > Finetune rank"},
    // The DoF tab's controls.
    {"lambda", "DoF > Lambda"},
    {"budget", "DoF > Budget"},
    {"strategy", "DoF > Strategy"},
    // The heads view's choosers.
    {"features", "Heads > M"},
    {"colour scale", "Heads > Colour scale"},
    {"text window", "Heads > Text window"},
    // The model and data panel.
    {"model", "Model and data > Model"},
    {"sample texts", "Model and data > Text"},
    {"text", "Model and data > Text"},
    {"sequence length", "Model and data > Tokens L"},
    {"number of windows", "Model and data > Windows T"},
    {"capture", "Analysis > Capture"},
};

}  // namespace

QString control_for_quantity(const std::string& quantity) {
  for (const Control& c : kControls)
    if (quantity == c.quantity) return QString::fromUtf8(c.control);
  return {};
}

QString message_with_control(const std::string& message, const std::string& quantity) {
  const QString text = QString::fromUtf8(message.c_str());
  const QString control = control_for_quantity(quantity);
  return control.isEmpty() ? text : text + " (" + control + ")";
}

QString message_with_control(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e)) return message_with_control(err->what(), err->quantity());
  return QString::fromUtf8(e.what());
}

}  // namespace attnscope::gui
