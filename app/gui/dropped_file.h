// What a file or folder dropped on the workbench window (or named on its command line) is: a model
// folder, a llama2.c checkpoint, a sample text or a session file. Decided by what is there (a
// config.json in the folder) and by the extension, never by reading weights.
#pragma once
#include <QString>

namespace attnscope::gui {

enum class DroppedKind { ModelFolder, Llama2cFile, TextFile, SessionFile, Unknown };

DroppedKind classify_dropped(const QString& path);
// Why a dropped path cannot be opened (for the error dialog), "" when it can.
QString dropped_problem(const QString& path);

}  // namespace attnscope::gui
