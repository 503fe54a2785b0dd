// A small table of strings rendered as Markdown, LaTeX or CSV: every numeric result attnscope
// prints for a paper goes through here, so the three formats always agree.
#pragma once
#include <string>
#include <vector>

namespace attnscope {

struct Table {
  std::string caption;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::vector<bool>> bold;  // optional, same shape as rows: highlighted cells

  void add_row(std::vector<std::string> cells, std::vector<bool> highlight = {});
};

std::string to_markdown(const Table& t);
std::string to_latex(const Table& t);  // a booktabs tabular inside a table environment
std::string to_csv(const Table& t);    // RFC 4180 quoting; bold is dropped

// Fixed-point number with `digits` decimals ("150.0"); NaN -> "nan".
std::string fmt_number(double v, int digits = 1);
// lambda as the paper writes it: "2^-8" for powers of two, else the shortest decimal ("0.001").
std::string fmt_lambda(double lambda);

}  // namespace attnscope
