#include "attnscope/io/text_source.h"

#include <cctype>

#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/tokenize/tokenizer.h"

namespace attnscope {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_all(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void read_jsonl(const std::string& path, std::istream& in, std::vector<TextDocument>* out) {
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(where, "not a JSON object");
    auto t = j.find("text");
    if (t == j.end() || !t->is_string()) fail(where, "no string field \"text\"");
    out->push_back({where, t->get<std::string>()});
  }
}

}  // namespace

std::vector<TextDocument> read_text_documents(const std::vector<std::string>& paths) {
  if (paths.empty()) fail_value("text", "is missing: give at least one text file, or - for standard input");
  std::vector<TextDocument> docs;
  for (const auto& p : paths) {
    if (p == "-") {
      docs.push_back({"<stdin>", read_all(std::cin)});
      continue;
    }
    std::ifstream in(p, std::ios::binary);
    if (!in) fail(p, "cannot open text file");
    if (ends_with(p, ".jsonl"))
      read_jsonl(p, in, &docs);
    else
      docs.push_back({p, read_all(in)});
    if (in.bad()) fail(p, "read error");
  }
  bool any = false;
  for (const auto& d : docs) any = any || d.text.find_first_not_of(" \t\r\n") != std::string::npos;
  if (!any) fail(paths.front(), "the text is empty");
  return docs;
}

std::vector<int64_t> encode_documents(const Tokenizer& tokenizer, const std::vector<TextDocument>& docs) {
  std::vector<int64_t> ids;
  for (const auto& d : docs) {
    const auto t = tokenizer.encode_for_model(d.text);
    ids.insert(ids.end(), t.begin(), t.end());
    if (tokenizer.eos_id() >= 0 && !tokenizer.adds_bos()) ids.push_back(tokenizer.eos_id());
  }
  return ids;
}

std::pair<std::string, std::string> split_text(const std::vector<TextDocument>& docs, double heldout_share) {
  std::string all;
  for (const auto& d : docs) all += (all.empty() ? "" : "\n\n") + d.text;
  size_t cut = size_t(double(all.size()) * (1.0 - heldout_share));
  while (cut < all.size() && !std::isspace(static_cast<unsigned char>(all[cut]))) ++cut;
  return {all.substr(0, cut), cut < all.size() ? all.substr(cut) : std::string()};
}

}  // namespace attnscope
