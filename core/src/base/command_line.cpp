// Command lines of jobs (command_line.h).
#include "attnscope/base/command_line.h"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attnscope/base/error.h"
#include "attnscope/base/table.h"

namespace attnscope {

int64_t parse_whole(const std::string& text, const char* quantity) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0')
    fail_value(quantity, "'" + text + "' is not a whole number");
  if (errno == ERANGE) fail_value(quantity, "'" + text + "' is out of range");
  return v;
}

uint64_t parse_unsigned(const std::string& text, const char* quantity) {
  if (!text.empty() && text[0] == '-') fail_value(quantity, "'" + text + "' is negative");
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0')
    fail_value(quantity, "'" + text + "' is not a whole number");
  if (errno == ERANGE) fail_value(quantity, "'" + text + "' is out of range");
  return v;
}

double parse_number(const std::string& text, const char* quantity) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0')
    fail_value(quantity, "'" + text + "' is not a number");
  return v;
}

std::string long_flag(const char* flags) {
  const char* comma = std::strrchr(flags, ',');
  return comma ? std::string(comma + 1) : std::string(flags);
}

std::string shell_quote(const std::string& arg) {
  if (arg.empty()) return "''";
  bool safe = true;
  for (const char c : arg) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == '/' || c == ',' || c == ':' || c == '=' || c == '+' || c == '@' ||
                    c == '%' || c == '^';
    if (!ok) {
      safe = false;
      break;
    }
  }
  if (safe) return arg;
  std::string q = "'";
  for (const char c : arg) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::string attnscope_command(const std::vector<std::string>& args) {
  std::string cmd = "attnscope";
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string number_arg(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

double number_of_arg(const std::string& text) {
  char* end = nullptr;
  const auto caret = text.find('^');
  if (caret == std::string::npos) {
    const double v = std::strtod(text.c_str(), &end);
    return end && *end == '\0' && !text.empty() ? v : std::nan("");
  }
  const std::string b = text.substr(0, caret), x = text.substr(caret + 1);
  char* end_b = nullptr;
  char* end_x = nullptr;
  const double base = std::strtod(b.c_str(), &end_b), exponent = std::strtod(x.c_str(), &end_x);
  if (b.empty() || x.empty() || *end_b != '\0' || *end_x != '\0') return std::nan("");
  return std::pow(base, exponent);
}

std::string lambda_arg(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda)) return number_arg(lambda);
  int e = 0;
  if (std::frexp(lambda, &e) == 0.5) return fmt_lambda(lambda);
  // The DoF view's slider moves in quarter powers of two; parse_lambda reads "2^x" as
  // std::pow(2, x), the same double the slider holds, so the command computes the same DoF.
  const double q = std::round(std::log2(lambda) * 4) / 4;
  if (std::pow(2.0, q) == lambda) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "2^%g", q);
    return buf;
  }
  return number_arg(lambda);
}

}  // namespace attnscope
