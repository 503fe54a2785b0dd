// `attnscope gui`: opens the workbench window. The views arrive with the GUI issue; until then the
// command shows the model summary in a window so the Qt build path stays exercised.
#include <QApplication>
#include <QLabel>
#include <QString>

#include "attnscope/model.h"
#include "cli/common.h"

namespace attnscope::cli {

void register_gui(CLI::App& app) {
  auto* cmd = app.add_subcommand("gui", "Open the attnscope workbench window");
  auto args = std::make_shared<ModelArgs>();
  args->add_to(cmd);
  cmd->callback([args] {
    LoadedModel m = args->load();
    const ModelConfig& c = m.model->config();
    int argc = 1;
    char name[] = "attnscope";
    char* argv[] = {name, nullptr};
    QApplication qapp(argc, argv);
    QLabel label(QString::fromStdString(m.path + "\n" + c.arch_name + ": " + std::to_string(c.n_layer) +
                                        " layers x " + std::to_string(c.n_head) + " heads"));
    label.setWindowTitle("attnscope");
    label.setMargin(24);
    label.show();
    qapp.exec();
  });
}

}  // namespace attnscope::cli
