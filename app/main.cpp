// attnscope: the command-line entry point. Each subcommand lives in cli/<name>.cpp and registers
// itself here; this file only parses, dispatches and maps errors to exit codes (0 ok, 1 error,
// 2 usage).
#include <CLI/CLI.hpp>

#include <iostream>

#include "attnscope/error.h"

int main(int argc, char** argv) {
  CLI::App app{"attnscope: inspect, measure and linearize the attention of transformer models"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const attnscope::Error& e) {
    std::cerr << "attnscope: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
