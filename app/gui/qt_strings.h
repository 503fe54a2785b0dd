// std::string <-> QString (UTF-8) for the workbench's sources.
#pragma once

#include <QString>
#include <string>

namespace attnscope::gui {

inline std::string to_std(const QString& s) { return s.toStdString(); }
inline QString to_q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace attnscope::gui
