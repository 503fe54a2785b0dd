#include "dropped_file.h"

#include <QDir>
#include <QFileInfo>

namespace attnscope::gui {

DroppedKind classify_dropped(const QString& path) {
  const QFileInfo info(path);
  if (info.isDir()) return QFileInfo(QDir(path).filePath("config.json")).isFile() ? DroppedKind::ModelFolder
                                                                                  : DroppedKind::Unknown;
  if (!info.isFile()) return DroppedKind::Unknown;
  const QString ext = info.suffix().toLower();
  if (ext == "bin") return DroppedKind::Llama2cFile;
  if (ext == "txt" || ext == "jsonl") return DroppedKind::TextFile;
  if (ext == "attnscope") return DroppedKind::SessionFile;
  return DroppedKind::Unknown;
}

QString dropped_problem(const QString& path) {
  const QFileInfo info(path);
  if (!info.exists()) return path + ": no such file or folder.";
  switch (classify_dropped(path)) {
    case DroppedKind::Unknown:
      if (info.isDir()) return path + ": not a model folder (it has no config.json).";
      return path + ": not something attnscope opens. Drop a model folder (with config.json), a llama2.c .bin "
                    "checkpoint, a .txt or .jsonl text, or a .attnscope session.";
    default:
      return {};
  }
}

}  // namespace attnscope::gui
