// What the workbench and main-window tests share: a QApplication named as the real one, QSettings
// and the capture workspace redirected to temporary folders (a test never reads or writes the
// user's), the bundled model and texts, and a wait that keeps the event loop running.
#pragma once
#include <gtest/gtest.h>

#include <QApplication>
#include <QCoreApplication>
#include <QDir>
#include <QSettings>
#include <QStringList>
#include <QTest>
#include <filesystem>
#include <functional>
#include <string>

#include "figure_export.h"
#include "test_support.h"

namespace attnscope::test {

inline std::string bundled_model() { return source_dir() + "/resources/models/brown-gpt2-mini"; }

inline QStringList bundled_texts() {
  QStringList files;
  for (const QString& f : QDir(QString::fromStdString(source_dir() + "/resources/texts")).entryList({"*.txt"}, QDir::Files, QDir::Name))
    files << QString::fromStdString(source_dir() + "/resources/texts/") + f;
  return files;
}

class WorkbenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(views::ensure_qt(&why)) << why;
    QCoreApplication::setOrganizationName("attnscope");
    QCoreApplication::setApplicationName("attnscope");
    settings_dir_ = temp_dir("settings");
    workspace_ = temp_dir("workspace");
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, QString::fromStdString(settings_dir_));
    QSettings().clear();
  }

  // Runs the event loop until `done` holds or `ms` have passed; returns done().
  static bool wait_until(const std::function<bool()>& done, int ms = 120000) {
    return QTest::qWaitFor(done, ms);
  }

  QString workspace() const { return QString::fromStdString(workspace_); }
  // Folders directly under the workspace root (one per capture).
  int workspace_entries() const {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(workspace_, ec); !ec && it != std::filesystem::directory_iterator(); ++it) ++n;
    return n;
  }

  std::string settings_dir_, workspace_;
};

}  // namespace attnscope::test
