#include "attnscope/base/table.h"

#include <cmath>
#include <cstdio>

namespace attnscope {

void Table::add_row(std::vector<std::string> cells, std::vector<bool> highlight) {
  highlight.resize(cells.size(), false);
  rows.push_back(std::move(cells));
  bold.push_back(std::move(highlight));
}

namespace {

bool is_bold(const Table& t, size_t r, size_t c) {
  return r < t.bold.size() && c < t.bold[r].size() && t.bold[r][c];
}

std::string latex_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': case '%': case '$': case '#': case '_': case '{': case '}': out += '\\'; out += ch; break;
      case '~': out += "\\textasciitilde{}"; break;
      case '^': out += "\\textasciicircum{}"; break;
      case '\\': out += "\\textbackslash{}"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

std::string to_markdown(const Table& t) {
  std::string s;
  if (!t.caption.empty()) s += t.caption + "\n\n";
  s += "|";
  for (const auto& h : t.header) s += " " + md_escape(h) + " |";
  s += "\n|";
  for (size_t c = 0; c < t.header.size(); ++c) s += c == 0 ? "---|" : "---:|";
  s += "\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    s += "|";
    for (size_t c = 0; c < t.rows[r].size(); ++c) {
      const std::string cell = md_escape(t.rows[r][c]);
      s += " " + (is_bold(t, r, c) ? "**" + cell + "**" : cell) + " |";
    }
    s += "\n";
  }
  return s;
}

std::string to_latex(const Table& t) {
  std::string s = "\\begin{table}[t]\n\\centering\n";
  if (!t.caption.empty()) s += "\\caption{" + latex_escape(t.caption) + "}\n";
  s += "\\begin{tabular}{l" + std::string(t.header.size() > 0 ? t.header.size() - 1 : 0, 'r') + "}\n\\toprule\n";
  for (size_t c = 0; c < t.header.size(); ++c) s += (c ? " & " : "") + latex_escape(t.header[c]);
  s += " \\\\\n\\midrule\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    for (size_t c = 0; c < t.rows[r].size(); ++c) {
      const std::string cell = latex_escape(t.rows[r][c]);
      s += (c ? " & " : "") + (is_bold(t, r, c) ? "\\textbf{" + cell + "}" : cell);
    }
    s += " \\\\\n";
  }
  s += "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
  return s;
}

std::string to_csv(const Table& t) {
  auto quote = [](const std::string& v) {
    if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
    std::string q = "\"";
    for (char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string s;
  for (size_t c = 0; c < t.header.size(); ++c) s += (c ? "," : "") + quote(t.header[c]);
  s += "\n";
  for (const auto& row : t.rows) {
    for (size_t c = 0; c < row.size(); ++c) s += (c ? "," : "") + quote(row[c]);
    s += "\n";
  }
  return s;
}

std::string fmt_number(double v, int digits) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string fmt_lambda(double lambda) {
  int e = 0;
  const double m = std::frexp(lambda, &e);  // lambda = m * 2^e, m in [0.5, 1)
  if (m == 0.5) return "2^" + std::to_string(e - 1);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", lambda);
  return buf;
}

}  // namespace attnscope
