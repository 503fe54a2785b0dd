#include "sentencepiece_bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "attnscope/base/error.h"
#include "utf8.h"

namespace attnscope {

namespace {

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's visible space

std::string byte_token(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

// The byte a "<0xXX>" token stands for, or -1 for any other token.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int value = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

// Reads the Metaspace prefix setting in both its old (add_prefix_space) and new (prepend_scheme)
// spellings.
bool metaspace_prefixes(const nlohmann::json& m) {
  const std::string scheme = json_string(m, "prepend_scheme");
  if (!scheme.empty()) return scheme != "never";
  return json_bool(m, "add_prefix_space", true);
}

}  // namespace

SentencePieceBpeTokenizer::SentencePieceBpeTokenizer(std::string source, BpeVocab vocab,
                                                     const SentencePieceOptions& options)
    : source_(std::move(source)), vocab_(std::move(vocab)), options_(options) {
  for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.model_id(byte_token(b));
  byte_of_id_.assign(vocab_.size(), -1);
  for (int64_t id = 0; id < vocab_.size(); ++id)
    if (vocab_.kinds[id] == BpeVocab::Kind::kModel) byte_of_id_[id] = parse_byte_token(vocab_.tokens[id]);
}

void SentencePieceBpeTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_.size() || vocab_.kinds[id] == BpeVocab::Kind::kUnused)
    fail(source_, "token id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(vocab_.size()) + ")");
}

void SentencePieceBpeTokenizer::encode_word(std::string_view word, std::vector<int64_t>* out) const {
  if (options_.ignore_merges) {
    const int32_t whole = vocab_.model_id(std::string(word));
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool last_was_unk = false;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = utf8_split_len(word, i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    const int32_t id = vocab_.model_id(std::string(ch));
    if (id >= 0) {
      symbols.push_back(id);
      last_was_unk = false;
      continue;
    }
    bool all_bytes = options_.byte_fallback;
    for (std::size_t k = 0; all_bytes && k < ch.size(); ++k)
      all_bytes = byte_ids_[static_cast<unsigned char>(ch[k])] >= 0;
    if (all_bytes) {
      for (char c : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      last_was_unk = false;
      continue;
    }
    if (options_.unk_id < 0)
      fail(source_, "character \"" + utf8_sanitize(ch) +
                        "\" is not in the vocabulary and there is no byte fallback or <unk>");
    if (!(options_.fuse_unk && last_was_unk)) symbols.push_back(static_cast<int32_t>(options_.unk_id));
    last_was_unk = true;
  }
  vocab_.merges.apply(symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

std::vector<int64_t> SentencePieceBpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  if (text.empty()) return ids;
  // Normalize: spaces -> "▁" and the dummy prefix. Special tokens in the text stay plain text.
  std::string norm;
  if (options_.prefix == SentencePieceOptions::Prefix::kAlways) norm = kMetaspace;
  for (char c : text) {
    if (c == ' ' && options_.replace_spaces)
      norm += kMetaspace;
    else
      norm += c;
  }
  if (options_.prefix == SentencePieceOptions::Prefix::kIfMissing && norm.rfind(kMetaspace, 0) != 0)
    norm = kMetaspace + norm;

  if (!options_.split_words) {
    encode_word(norm, &ids);
    return ids;
  }
  // Metaspace split: "▁a▁▁b" -> "▁a", "▁", "▁b" (each "▁" starts a word).
  std::size_t start = 0;
  for (std::size_t pos = norm.find(kMetaspace, 1); pos != std::string::npos;
       pos = norm.find(kMetaspace, pos + kMetaspace.size())) {
    encode_word(std::string_view(norm).substr(start, pos - start), &ids);
    start = pos;
  }
  encode_word(std::string_view(norm).substr(start), &ids);
  return ids;
}

std::string SentencePieceBpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    check_id(id);
    if (vocab_.kinds[id] == BpeVocab::Kind::kSpecial) continue;  // <s>, </s>, <unk> print nothing
    if (byte_of_id_[id] >= 0)
      out += static_cast<char>(byte_of_id_[id]);
    else if (vocab_.kinds[id] == BpeVocab::Kind::kAdded)
      out += vocab_.tokens[id];
    else
      out += replace_all(vocab_.tokens[id], kMetaspace, " ");
  }
  // The dummy prefix added by encode() comes back as a leading space.
  int strip = options_.strip_leading_spaces;
  std::size_t cut = 0;
  while (strip-- > 0 && cut < out.size() && out[cut] == ' ') ++cut;
  return out.substr(cut);
}

std::string SentencePieceBpeTokenizer::piece(int64_t id) const {
  check_id(id);
  const int b = byte_of_id_[id];
  // A lone byte of a multi-byte character is not text; keep its <0xXX> name as the label.
  if (b >= 0) return b < 0x80 ? std::string(1, static_cast<char>(b)) : vocab_.tokens[id];
  if (vocab_.kinds[id] != BpeVocab::Kind::kModel) return vocab_.tokens[id];
  return replace_all(vocab_.tokens[id], kMetaspace, " ");
}

bool is_sentencepiece_json(const nlohmann::json& root) {
  auto model = root.find("model");
  if (model != root.end() && json_bool(*model, "byte_fallback", false)) return true;
  for (const auto* p : json_components(root, "pre_tokenizer", "pretokenizers"))
    if (json_string(*p, "type") == "Metaspace") return true;
  for (const auto* d : json_components(root, "decoder", "decoders"))
    if (json_string(*d, "type") == "Metaspace" || json_string(*d, "type") == "ByteFallback")
      return true;
  for (const auto* n : json_components(root, "normalizer", "normalizers"))
    if (json_string(*n, "type") == "Prepend" && json_string(*n, "prepend") == kMetaspace) return true;
  return false;
}

std::unique_ptr<Tokenizer> sentencepiece_tokenizer_from_json(const nlohmann::json& root,
                                                             const std::string& path) {
  const auto& model = root.at("model");
  if (!model.contains("vocab")) fail(path, "model has no \"vocab\"");
  SentencePieceOptions opt;
  opt.prefix = SentencePieceOptions::Prefix::kNone;
  opt.replace_spaces = false;

  for (const auto* n : json_components(root, "normalizer", "normalizers")) {
    const std::string type = json_string(*n, "type");
    const auto pattern = n->find("pattern");
    if (type == "Prepend" && json_string(*n, "prepend") == kMetaspace) {
      opt.prefix = SentencePieceOptions::Prefix::kAlways;
    } else if (type == "Replace" && pattern != n->end() && json_string(*pattern, "String") == " " &&
               json_string(*n, "content") == kMetaspace) {
      opt.replace_spaces = true;
    } else {
      fail(path, "normalizer \"" + type + "\" is not supported for a SentencePiece-style BPE");
    }
  }
  for (const auto* p : json_components(root, "pre_tokenizer", "pretokenizers")) {
    const std::string type = json_string(*p, "type");
    if (type != "Metaspace")
      fail(path, "pre-tokenizer \"" + type + "\" is not supported for a SentencePiece-style BPE");
    const std::string replacement = json_string(*p, "replacement");
    if (!replacement.empty() && replacement != kMetaspace)
      fail(path, "Metaspace replacement \"" + replacement + "\" is not supported (only \"▁\")");
    opt.replace_spaces = true;
    opt.split_words = json_bool(*p, "split", true);
    if (metaspace_prefixes(*p) && opt.prefix == SentencePieceOptions::Prefix::kNone)
      opt.prefix = SentencePieceOptions::Prefix::kIfMissing;
  }

  // Decoding strips what the decoder says; without a decoder, the prefix encode() adds.
  opt.strip_leading_spaces = opt.prefix == SentencePieceOptions::Prefix::kNone ? 0 : 1;
  const auto decoders = json_components(root, "decoder", "decoders");
  if (!decoders.empty()) {
    opt.strip_leading_spaces = 0;
    for (const auto* d : decoders) {
      const std::string type = json_string(*d, "type");
      if (type == "Strip" && json_string(*d, "content") == " ") {
        auto start = d->find("start");
        if (start != d->end() && start->is_number_integer())
          opt.strip_leading_spaces =
              static_cast<int>(std::clamp<int64_t>(start->get<int64_t>(), 0, 1 << 16));
      } else if (type == "Metaspace" && metaspace_prefixes(*d)) {
        opt.strip_leading_spaces = 1;
      }
    }
  }

  opt.byte_fallback = json_bool(model, "byte_fallback", false);
  opt.fuse_unk = json_bool(model, "fuse_unk", false);
  opt.ignore_merges = json_bool(model, "ignore_merges", false);
  const MergeList merges =
      model.contains("merges") ? parse_json_merges(model["merges"], path) : MergeList{};
  BpeVocab vocab = build_bpe_vocab(model["vocab"], merges, parse_added_tokens(root, path), path);

  const std::string unk = json_string(model, "unk_token");
  if (!unk.empty()) {
    opt.unk_id = vocab.id_of(unk);
    if (opt.unk_id < 0) fail(path, "unk_token \"" + unk + "\" is not in the vocabulary");
  }
  const std::string template_bos = template_leading_special(root);
  opt.bos_id = vocab.id_of("<s>");
  if (!template_bos.empty()) opt.bos_id = vocab.id_of(template_bos);
  opt.eos_id = vocab.id_of("</s>");
  // A TemplateProcessing post_processor says whether BOS is added; without one, Llama's default.
  const auto pp = root.find("post_processor");
  if (pp != root.end() && json_string(*pp, "type") == "TemplateProcessing")
    opt.adds_bos = !template_bos.empty();
  return std::make_unique<SentencePieceBpeTokenizer>(path, std::move(vocab), opt);
}

}  // namespace attnscope
