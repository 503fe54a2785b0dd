#include "gpt2_bpe_tokenizer.h"

#include "attnscope/base/error.h"
#include "byte_level.h"
#include "utf8.h"

namespace attnscope {

namespace {

// Words longer than this are rare (long runs of spaces or symbols) and not worth caching; the cap on
// entries keeps memory bounded on huge corpora.
constexpr std::size_t kMaxCachedWordBytes = 64;
constexpr std::size_t kMaxCacheEntries = 1 << 18;

std::string hex_byte(int b) {
  static const char* digits = "0123456789ABCDEF";
  return std::string{digits[(b >> 4) & 15], digits[b & 15]};
}

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::string source, BpeVocab vocab,
                                   const Gpt2BpeOptions& options)
    : source_(std::move(source)), vocab_(std::move(vocab)), options_(options) {
  if (options_.split_regex) splitter_ = std::make_unique<RegexSplitter>(*options_.split_regex, source_);
  const auto& chars = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = vocab_.model_id(chars[b]);
    if (byte_ids_[b] < 0)
      fail(source_, "byte-level vocabulary has no token for byte 0x" + hex_byte(b) + " (\"" +
                        chars[b] + "\")");
  }
  eos_id_ = vocab_.id_of("<|endoftext|>");
}

void Gpt2BpeTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_.size() || vocab_.kinds[id] == BpeVocab::Kind::kUnused)
    fail(source_, "token id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(vocab_.size()) + ")");
}

void Gpt2BpeTokenizer::encode_word(std::string_view word, std::vector<int64_t>* out) const {
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  const int32_t whole = options_.ignore_merges ? vocab_.model_id(bytes_to_byte_level(word)) : -1;
  if (whole >= 0) {
    symbols.push_back(whole);
  } else {
    symbols.reserve(word.size());
    for (char c : word) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    vocab_.merges.apply(symbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(symbols));
  }
}

std::vector<int64_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  if (text.empty()) return ids;
  std::string prefixed;
  if (options_.add_prefix_space && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  // Special tokens such as <|endoftext|> are not recognised in the text: like GPT-2's encoder.py,
  // encode() treats every byte as text, so arbitrary input cannot inject control tokens.
  if (!splitter_) {
    encode_word(text, &ids);
    return ids;
  }
  for (std::string_view word : splitter_->split(text)) encode_word(word, &ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    check_id(id);
    switch (vocab_.kinds[id]) {
      case BpeVocab::Kind::kSpecial:
        break;  // control tokens (<|endoftext|>) print nothing
      case BpeVocab::Kind::kAdded:
        out += vocab_.tokens[id];
        break;
      default:
        out += byte_level_to_bytes(vocab_.tokens[id]);
    }
  }
  return out;
}

std::string Gpt2BpeTokenizer::piece(int64_t id) const {
  check_id(id);
  if (vocab_.kinds[id] != BpeVocab::Kind::kModel) return vocab_.tokens[id];
  // A token may hold part of a multi-byte character; labels must be valid UTF-8.
  return utf8_sanitize(byte_level_to_bytes(vocab_.tokens[id]));
}

std::unique_ptr<Tokenizer> gpt2_tokenizer_from_json(const nlohmann::json& root,
                                                    const std::string& path) {
  // load_hf_tokenizer has checked that "model" is an object.
  const auto& model = root.at("model");
  if (!model.contains("vocab")) fail(path, "model has no \"vocab\"");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!json_string(model, key).empty())
      fail(path, std::string("model.") + key + " is not supported for a byte-level BPE");

  Gpt2BpeOptions opt;
  bool byte_level_regex = false;
  for (const auto* p : json_components(root, "pre_tokenizer", "pretokenizers")) {
    const std::string type = json_string(*p, "type");
    if (type == "ByteLevel") {
      opt.add_prefix_space = json_bool(*p, "add_prefix_space", false);
      byte_level_regex = json_bool(*p, "use_regex", true);
    } else if (type == "Split") {
      const auto pattern = p->find("pattern");
      const std::string regex =
          pattern != p->end() ? json_string(*pattern, "Regex") : std::string();
      if (regex.empty())
        fail(path, "Split pre-tokenizer without a \"Regex\" pattern is not supported");
      if (json_string(*p, "behavior") != "Isolated" || json_bool(*p, "invert", false))
        fail(path, "Split pre-tokenizer: only behavior \"Isolated\" without invert is supported");
      opt.split_regex = regex;
    } else {
      fail(path, "pre-tokenizer \"" + type + "\" is not supported for a byte-level BPE");
    }
  }
  // A Split regex replaces the one ByteLevel would apply (Llama 3, Qwen set use_regex false).
  if (!opt.split_regex && byte_level_regex) opt.split_regex = kGpt2SplitPattern;

  // Normalizers: none, or NFC, which is the identity on the NFC text nearly all input already is;
  // anything else would change ids silently, so it is refused.
  const auto norm = root.find("normalizer");
  if (norm != root.end() && !norm->is_null() && json_string(*norm, "type") != "NFC")
    fail(path, "normalizer \"" + json_string(*norm, "type") +
                   "\" is not supported for a byte-level BPE");

  opt.ignore_merges = json_bool(model, "ignore_merges", false);
  const MergeList merges =
      model.contains("merges") ? parse_json_merges(model["merges"], path) : MergeList{};
  BpeVocab vocab = build_bpe_vocab(model["vocab"], merges, parse_added_tokens(root, path), path);

  const std::string bos = template_leading_special(root);
  if (!bos.empty()) {
    opt.bos_id = vocab.id_of(bos);
    if (opt.bos_id < 0) fail(path, "post_processor uses \"" + bos + "\", which is not a token");
    opt.adds_bos = true;
  }
  return std::make_unique<Gpt2BpeTokenizer>(path, std::move(vocab), opt);
}

std::unique_ptr<Tokenizer> parse_gpt2_tokenizer(std::string_view encoder_json, std::string_view merges_text,
                                                const std::string& encoder_name,
                                                const std::string& merges_name) {
  const nlohmann::json vocab = parse_json_text(encoder_json, encoder_name, "BPE vocabulary (token -> id)");
  const MergeList merges = parse_merges_text(merges_text, merges_name);
  const std::string where = encoder_name + " + " + merges_name;
  // These files carry no added-token list; GPT-2's end-of-text token is the one control token.
  std::vector<AddedToken> added;
  if (vocab.is_object() && vocab.contains("<|endoftext|>") &&
      vocab["<|endoftext|>"].is_number_integer())
    added.push_back({"<|endoftext|>", vocab["<|endoftext|>"].get<int64_t>(), true});
  Gpt2BpeOptions opt;
  opt.split_regex = kGpt2SplitPattern;
  return std::make_unique<Gpt2BpeTokenizer>(
      where, build_bpe_vocab(vocab, merges, added, where), opt);
}

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json,
                                               const std::string& merges_file) {
  const std::string vocab = read_file_bytes(encoder_json, "BPE vocabulary (token -> id)");
  const std::string merges = read_file_bytes(merges_file, "BPE merges file");
  return parse_gpt2_tokenizer(vocab, merges, encoder_json, merges_file);
}

}  // namespace attnscope
