// The llama2.c tokenizer.bin: int32 max_token_length, then per token {float32 score, int32 len,
// len bytes}. Encoding and decoding follow llama2.c's run.c (encode / decode) exactly, so token ids
// match what run.c feeds the model.
#include <cstring>
#include <queue>
#include <unordered_map>

#include "attnscope/base/error.h"
#include "attnscope/tokenize/tokenizer.h"
#include "bpe_vocab.h"
#include "utf8.h"

namespace attnscope {

namespace {

constexpr int32_t kBos = 1, kEos = 2;  // fixed by llama2.c
constexpr int32_t kByteOffset = 3;     // run.c: byte b is token b + 3 (<0x00> follows <unk> <s> </s>)
// Longer than any real piece; bounds what a corrupt header can make us allocate.
constexpr int32_t kMaxTokenLength = 1 << 16;

// The byte a "<0xXX>" piece stands for, or -1. (run.c uses sscanf "<0x%02hhX>"; this also requires
// the closing '>' and nothing after it, which every real piece satisfies.)
int parse_byte_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = p[k];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(const std::string& path, int64_t vocab_size);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  std::string piece(int64_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  bool adds_bos() const override { return true; }
  std::string kind() const override { return "llama2c"; }

 private:
  int32_t lookup(const std::string& s) const {
    auto it = ids_.find(s);
    return it == ids_.end() ? -1 : it->second;
  }
  int32_t byte_token(unsigned char b) const;
  void check_id(int64_t id) const;
  void merge(std::vector<int32_t>& tokens) const;

  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> ids_;
};

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int64_t vocab_size) : path_(path) {
  if (vocab_size < 3 || vocab_size > (1 << 24))
    fail(path, "vocab_size " + std::to_string(vocab_size) +
                   " is not plausible (BOS is 1 and EOS is 2, so at least 3)");
  const std::string bytes = read_file_bytes(path, "llama2.c tokenizer");
  const std::size_t size = bytes.size();
  auto read_i32 = [&](std::size_t at) {
    int32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  if (size < 4) fail(path, "too short for a llama2.c tokenizer (" + std::to_string(size) + " bytes)");
  const int32_t max_len = read_i32(0);
  if (max_len <= 0 || max_len > kMaxTokenLength)
    fail(path, "max_token_length " + std::to_string(max_len) + " is not plausible");

  std::size_t off = 4;
  pieces_.reserve(vocab_size);
  scores_.reserve(vocab_size);
  for (int64_t i = 0; i < vocab_size; ++i) {
    const std::string tok = "token " + std::to_string(i) + " of " + std::to_string(vocab_size);
    if (size - off < 8)
      fail(path, "truncated: " + tok + " starts past the end of the file (" + std::to_string(size) +
                     " bytes); is the file cut short or vocab_size too large?");
    float score;
    std::memcpy(&score, bytes.data() + off, 4);
    const int32_t len = read_i32(off + 4);
    off += 8;
    if (len < 0) fail(path, tok + " has a negative length " + std::to_string(len));
    if (len > max_len)
      fail(path, tok + " has length " + std::to_string(len) + ", more than max_token_length " +
                     std::to_string(max_len));
    if (static_cast<std::size_t>(len) > size - off)
      fail(path, "truncated: " + tok + " runs past the end of the file");
    pieces_.emplace_back(bytes, off, len);
    scores_.push_back(score);
    ids_.emplace(pieces_.back(), static_cast<int32_t>(i));  // the first of duplicate pieces wins
    off += len;
  }
  if (off != size)
    fail(path, std::to_string(size - off) + " bytes remain after " + std::to_string(vocab_size) +
                   " tokens: the vocab_size given does not match this file");
}

int32_t Llama2cTokenizer::byte_token(unsigned char b) const {
  const int32_t id = b + kByteOffset;
  if (id >= vocab_size())
    fail(path_, "byte fallback needs token " + std::to_string(id) + " but the vocabulary has " +
                    std::to_string(vocab_size()));
  return id;
}

void Llama2cTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    fail(path_, "token id " + std::to_string(id) + " is out of range [0, " +
                    std::to_string(vocab_size()) + ")");
}

// run.c merges, over and over, the adjacent pair whose concatenation is a token with the highest
// score (the leftmost on ties), until no pair is a token. Rescanning every pair per merge is
// quadratic; a max-heap over candidate pairs picks the very same pair each step in O(n log n).
void Llama2cTokenizer::merge(std::vector<int32_t>& tokens) const {
  const int n = static_cast<int>(tokens.size());
  if (n < 2) return;
  struct Node {
    int32_t id;
    int prev, next;
    int version;  // bumped on every change, so a queued candidate can tell it is stale
    bool alive;
  };
  std::vector<Node> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = {tokens[i], i - 1, i + 1 < n ? i + 1 : -1, 0, true};

  struct Candidate {
    float score;
    int left, right;
    int left_version, right_version;
    int32_t merged;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto push = [&](int left) {
    if (left < 0) return;
    const int right = nodes[left].next;
    if (right < 0) return;
    const int32_t id = lookup(pieces_[nodes[left].id] + pieces_[nodes[right].id]);
    // run.c starts from best_score = -1e10 and needs a strictly better score (so NaN never merges).
    if (id < 0 || !(scores_[id] > -1e10f)) return;
    queue.push({scores_[id], left, right, nodes[left].version, nodes[right].version, id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Node& l = nodes[c.left];
    Node& r = nodes[c.right];
    if (!l.alive || !r.alive || l.next != c.right || l.version != c.left_version ||
        r.version != c.right_version)
      continue;
    l.id = c.merged;
    ++l.version;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = c.left;
    r.alive = false;
    push(l.prev);
    push(c.left);
  }
  tokens.clear();
  for (int i = 0; i >= 0; i = nodes[i].next) tokens.push_back(nodes[i].id);
}

std::vector<int64_t> Llama2cTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  // run.c's add_dummy_prefix: a " " token in front, but only for non-empty text. (A vocabulary
  // without " " would make run.c emit -1; use the byte token for ' ' instead.)
  if (!text.empty()) {
    const int32_t space = lookup(" ");
    tokens.push_back(space >= 0 ? space : byte_token(' '));
  }
  // Walk UTF-8 codepoints as run.c does: gather a lead byte and up to 3 continuation bytes, look the
  // codepoint up, else emit its bytes as byte tokens.
  std::string cp;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) cp.clear();
    cp += static_cast<char>(c);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if ((next & 0xC0) == 0x80 && cp.size() < 4) continue;
    const int32_t id = lookup(cp);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (char b : cp) tokens.push_back(byte_token(static_cast<unsigned char>(b)));
    }
    cp.clear();
  }
  merge(tokens);
  return std::vector<int64_t>(tokens.begin(), tokens.end());
}

std::string Llama2cTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    check_id(id);
    // BOS and EOS mark sequence boundaries; run.c never prints them.
    if (id == kBos || id == kEos) continue;
    const std::string& p = pieces_[id];
    const int byte = parse_byte_piece(p);
    if (byte >= 0) {
      out += static_cast<char>(byte);
      continue;
    }
    // After BOS, SentencePiece's decoder drops the leading space of the dummy prefix.
    const bool after_bos = i > 0 && ids[i - 1] == kBos;
    out.append(p, after_bos && !p.empty() && p[0] == ' ' ? 1 : 0, std::string::npos);
  }
  return out;
}

std::string Llama2cTokenizer::piece(int64_t id) const {
  check_id(id);
  if (id == kBos) return "<s>";  // stored as "\n<s>\n" by llama2.c's exporter
  if (id == kEos) return "</s>";
  const std::string& p = pieces_[id];
  const int byte = parse_byte_piece(p);
  // A lone byte of a multi-byte character is not text; keep its <0xXX> name as the label.
  if (byte >= 0 && byte < 0x80) return std::string(1, static_cast<char>(byte));
  return utf8_sanitize(p);
}

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t vocab_size) {
  return std::make_unique<Llama2cTokenizer>(path, vocab_size);
}

}  // namespace attnscope
