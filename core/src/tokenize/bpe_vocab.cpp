#include "bpe_vocab.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "attnscope/base/error.h"

namespace attnscope {

namespace {

// Far beyond any real vocabulary (the largest are ~260k).
constexpr int64_t kMaxTokenId = 1 << 24;
// The id tables are indexed by id, so their size is the largest id, not the number of tokens. Real
// files number their tokens densely (0 .. n-1, added tokens right after); a gap is allowed but
// bounded, so that a file of a few tokens with a huge id cannot allocate gigabytes.
constexpr int64_t kMaxIdGap = 1 << 16;

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where) {
  const auto space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos)
    fail(where, "merge \"" + line + "\" is not of the form \"left right\"");
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace

int32_t BpeVocab::id_of(const std::string& token) const {
  auto it = model.find(token);
  if (it != model.end()) return it->second;
  auto at = added.find(token);
  return at == added.end() ? -1 : at->second;
}

BpeVocab build_bpe_vocab(const nlohmann::json& vocab, const MergeList& merges,
                         const std::vector<AddedToken>& added, const std::string& where) {
  if (!vocab.is_object()) fail(where, "vocabulary is not a JSON object of token -> id");
  BpeVocab v;
  const int64_t n_tokens = int64_t(vocab.size() + added.size());
  const int64_t id_limit = std::min(kMaxTokenId, n_tokens + kMaxIdGap);
  auto claim = [&](int64_t id, const std::string& token, BpeVocab::Kind kind) {
    if (id < 0 || id >= id_limit)
      fail(where, "token \"" + token + "\" has an out-of-range id " + std::to_string(id) + " (" +
                      std::to_string(n_tokens) + " tokens; ids must be below " +
                      std::to_string(id_limit) + ")");
    if (id >= v.size()) {
      v.tokens.resize(id + 1);
      v.kinds.resize(id + 1, BpeVocab::Kind::kUnused);
    }
    v.tokens[id] = token;
    v.kinds[id] = kind;
  };
  v.model.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer()) fail(where, "token \"" + it.key() + "\" has a non-integer id");
    const int64_t id = it->get<int64_t>();
    if (id >= 0 && id < v.size() && v.kinds[id] != BpeVocab::Kind::kUnused)
      fail(where, "tokens \"" + v.tokens[id] + "\" and \"" + it.key() + "\" share id " +
                      std::to_string(id));
    claim(id, it.key(), BpeVocab::Kind::kModel);
    v.model[it.key()] = static_cast<int32_t>(id);
  }
  for (const auto& a : added) {
    // An added token may repeat a model token (Llama's <s>, GPT-2's <|endoftext|>) with the same id.
    auto same = v.model.find(a.content);
    if (same != v.model.end() && same->second != a.id)
      fail(where, "added token \"" + a.content + "\" has id " + std::to_string(a.id) +
                      " but the vocabulary gives it " + std::to_string(same->second));
    if (same == v.model.end() && a.id >= 0 && a.id < v.size() &&
        v.kinds[a.id] != BpeVocab::Kind::kUnused)
      fail(where, "added token \"" + a.content + "\" reuses id " + std::to_string(a.id) +
                      " of \"" + v.tokens[a.id] + "\"");
    claim(a.id, a.content, a.special ? BpeVocab::Kind::kSpecial : BpeVocab::Kind::kAdded);
    v.added[a.content] = static_cast<int32_t>(a.id);
  }
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = merges[i];
    const int32_t l = v.model_id(left), r = v.model_id(right), m = v.model_id(left + right);
    const std::string what = "merge " + std::to_string(i) + " \"" + left + " " + right + "\"";
    if (l < 0 || r < 0) fail(where, what + " uses a token that is not in the vocabulary");
    if (m < 0) fail(where, what + " makes \"" + left + right + "\", which is not in the vocabulary");
    v.merges.add(l, r, m);
  }
  return v;
}

std::string json_string(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

bool json_bool(const nlohmann::json& obj, const char* key, bool fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::vector<const nlohmann::json*> json_components(const nlohmann::json& root, const char* key,
                                                   const char* list_key) {
  std::vector<const nlohmann::json*> out;
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return out;
  auto list = it->find(list_key);
  if (json_string(*it, "type") == "Sequence" && list != it->end() && list->is_array()) {
    for (const auto& c : *list) out.push_back(&c);
  } else {
    out.push_back(&*it);
  }
  return out;
}

bool has_json_component(const nlohmann::json& root, const char* key, const char* list_key,
                        const std::string& type) {
  for (const auto* c : json_components(root, key, list_key))
    if (json_string(*c, "type") == type) return true;
  return false;
}

std::string read_file_bytes(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open " + what);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error in " + what);
  return bytes;
}

nlohmann::json parse_json_text(std::string_view text, const std::string& where, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, what + " is not valid JSON (" + e.what() + ")");
  }
}

MergeList parse_json_merges(const nlohmann::json& merges, const std::string& where) {
  if (!merges.is_array()) fail(where, "\"merges\" is not an array");
  MergeList out;
  out.reserve(merges.size());
  for (const auto& m : merges) {
    if (m.is_string()) {
      out.push_back(split_merge(m.get<std::string>(), where));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(where, "a merge is neither \"left right\" nor [\"left\", \"right\"]: " + m.dump());
    }
  }
  return out;
}

MergeList read_merges_file(const std::string& path) {
  return parse_merges_text(read_file_bytes(path, "BPE merges file"), path);
}

MergeList parse_merges_text(std::string_view bytes, const std::string& where) {
  MergeList out;
  std::size_t pos = 0;
  int lineno = 0;
  while (pos < bytes.size()) {
    auto end = bytes.find('\n', pos);
    if (end == std::string::npos) end = bytes.size();
    std::string line(bytes.substr(pos, end - pos));
    pos = end + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    out.push_back(split_merge(line, where + ":" + std::to_string(lineno)));
  }
  return out;
}

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& root, const std::string& where) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) fail(where, "\"added_tokens\" is not an array");
  for (const auto& t : *it) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      fail(where, "an added token lacks an integer \"id\" or a string \"content\": " + t.dump());
    AddedToken a;
    a.content = t["content"].get<std::string>();
    a.id = t["id"].get<int64_t>();
    auto special = t.find("special");
    a.special = special != t.end() && special->is_boolean() && special->get<bool>();
    out.push_back(a);
  }
  return out;
}

std::string template_leading_special(const nlohmann::json& root) {
  auto pp = root.find("post_processor");
  if (pp == root.end() || !pp->is_object()) return "";
  std::vector<const nlohmann::json*> procs{&*pp};
  if (json_string(*pp, "type") == "Sequence" && pp->contains("processors") &&
      (*pp)["processors"].is_array()) {
    procs.clear();
    for (const auto& p : (*pp)["processors"]) procs.push_back(&p);
  }
  for (const auto* p : procs) {
    if (!p->is_object() || json_string(*p, "type") != "TemplateProcessing") continue;
    auto single = p->find("single");
    if (single == p->end() || !single->is_array() || single->empty()) continue;
    const auto& first = (*single)[0];
    if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object() &&
        first["SpecialToken"].contains("id") && first["SpecialToken"]["id"].is_string())
      return first["SpecialToken"]["id"].get<std::string>();
  }
  return "";
}

}  // namespace attnscope
