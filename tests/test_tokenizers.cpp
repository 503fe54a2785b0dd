// Tokenizers: GPT-2 byte-level BPE against reference ids, the llama2.c tokenizer against a direct
// port of run.c's encode, a hand-built SentencePiece-style tokenizer.json, the BPE trainer against
// a naive trainer, and the errors for bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/tokenize/tokenizer.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_tokenizers {

namespace fs = std::filesystem;
using attnscope::Tokenizer;
using attnscope::test::shared_model_file;
using attnscope::test::temp_dir;
using Ids = std::vector<int64_t>;

namespace {

using attnscope::test::read_file;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Runs `f` and returns the attnscope::Error message it throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const attnscope::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_MENTIONS(stmt, needle)                                         \
  do {                                                                              \
    const std::string msg_ = error_of([&] { stmt; });                               \
    EXPECT_FALSE(msg_.empty()) << #stmt " did not throw attnscope::Error";          \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_;         \
  } while (0)

std::string concat_pieces(const Tokenizer& t, const Ids& ids) {
  std::string s;
  for (int64_t id : ids) s += t.piece(id);
  return s;
}

// ------------------------------------------------------------------------------------------------
// GPT-2

#define GPT2_FILES_OR_SKIP(enc, bpe, ref)                                                        \
  const std::string enc = shared_model_file("gpt2-tokenizer/encoder.json");                      \
  const std::string bpe = shared_model_file("gpt2-tokenizer/vocab.bpe");                         \
  const std::string ref = shared_model_file("gpt2-tokenizer/reference_token_ids.json");          \
  if (enc.empty() || bpe.empty() || ref.empty())                                                 \
    GTEST_SKIP() << "GPT-2 tokenizer files missing under " << attnscope::test::shared_models()   \
                 << "/gpt2-tokenizer/";

struct Reference {
  std::string text;
  Ids ids;
};

std::vector<Reference> read_reference(const std::string& path) {
  std::vector<Reference> out;
  for (const auto& e : nlohmann::json::parse(read_file(path)))
    out.push_back({e["text"].get<std::string>(), e["ids"].get<Ids>()});
  return out;
}

void expect_matches_reference(const Tokenizer& tok, const std::vector<Reference>& refs,
                              const std::string& loader) {
  for (const auto& r : refs) {
    EXPECT_EQ(tok.encode(r.text), r.ids) << loader << ": text \"" << r.text << "\"";
    EXPECT_EQ(tok.decode(r.ids), r.text) << loader;
  }
}

// The merges of vocab.bpe, without the #version line.
std::vector<std::string> merge_lines(const std::string& vocab_bpe) {
  std::vector<std::string> lines;
  std::string all = read_file(vocab_bpe), line;
  std::size_t pos = 0;
  while (pos < all.size()) {
    auto end = all.find('\n', pos);
    if (end == std::string::npos) end = all.size();
    line = all.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.rfind("#version", 0) != 0) lines.push_back(line);
  }
  return lines;
}

TEST(Gpt2Tokenizer, MatchesReferenceIdsAndDecodesBack) {
  GPT2_FILES_OR_SKIP(enc, bpe, ref);
  const auto tok = attnscope::load_gpt2_tokenizer(enc, bpe);
  const auto refs = read_reference(ref);
  ASSERT_GE(refs.size(), 10u);
  expect_matches_reference(*tok, refs, "encoder.json+vocab.bpe");

  EXPECT_EQ(tok->kind(), "gpt2-bpe");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->encode_for_model("Hello world"), tok->encode("Hello world"));
  // Pieces read as text: " world" has its space; a lone UTF-8 lead byte is shown as U+FFFD.
  EXPECT_EQ(tok->piece(995), " world");
  EXPECT_EQ(tok->piece(50256), "<|endoftext|>");
  EXPECT_EQ(tok->piece(127), "\xEF\xBF\xBD");
  // Control tokens print nothing; text around them is kept.
  EXPECT_EQ(tok->decode({15496, 50256, 995}), "Hello world");
  // Invalid UTF-8 input still round-trips byte for byte.
  const std::string raw = "ok \xFF\xFE bytes \xC3";
  EXPECT_EQ(tok->decode(tok->encode(raw)), raw);
}

TEST(Gpt2Tokenizer, AllLoadersGiveTheSameIds) {
  GPT2_FILES_OR_SKIP(enc, bpe, ref);
  const auto refs = read_reference(ref);

  // (a) vocab.json + merges.txt through load_hf_tokenizer.
  const std::string plain = temp_dir("gpt2_plain");
  write_file(plain + "/vocab.json", read_file(enc));
  write_file(plain + "/merges.txt", read_file(bpe));
  expect_matches_reference(*attnscope::load_hf_tokenizer(plain), refs, "vocab.json+merges.txt");

  // (b) encoder.json + vocab.bpe through load_hf_tokenizer.
  const std::string openai = temp_dir("gpt2_openai");
  write_file(openai + "/encoder.json", read_file(enc));
  write_file(openai + "/vocab.bpe", read_file(bpe));
  expect_matches_reference(*attnscope::load_hf_tokenizer(openai), refs, "encoder.json+vocab.bpe");

  // (c) tokenizer.json as Hugging Face writes it for gpt2: merges as "a b" strings.
  const auto lines = merge_lines(bpe);
  nlohmann::json root;
  root["version"] = "1.0";
  root["added_tokens"] = {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}};
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  root["decoder"] = {{"type", "ByteLevel"}};
  root["model"] = {{"type", "BPE"}, {"vocab", nlohmann::json::parse(read_file(enc))},
                   {"merges", lines}};
  const std::string hf = temp_dir("gpt2_hf");
  write_file(hf + "/tokenizer.json", root.dump());
  const auto from_json = attnscope::load_hf_tokenizer(hf);
  EXPECT_EQ(from_json->kind(), "gpt2-bpe");
  EXPECT_EQ(from_json->eos_id(), 50256);
  expect_matches_reference(*from_json, refs, "tokenizer.json");

  // (d) the newer layout: merges as pairs, the regex in a Split pre-tokenizer (Llama 3 style).
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& l : lines) {
    const auto sp = l.find(' ');
    pairs.push_back({l.substr(0, sp), l.substr(sp + 1)});
  }
  root["model"]["merges"] = pairs;
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const std::string hf2 = temp_dir("gpt2_hf_pairs");
  write_file(hf2 + "/tokenizer.json", root.dump());
  expect_matches_reference(*attnscope::load_hf_tokenizer(hf2), refs, "tokenizer.json (pairs+Split)");

  // A different Split regex must change the pre-tokenization: one digit per piece.
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\p{N}|[^\p{N}]+)";
  write_file(hf2 + "/tokenizer.json", root.dump());
  const auto digits = attnscope::load_hf_tokenizer(hf2);
  EXPECT_EQ(digits->encode("12345").size(), 5u);
  EXPECT_EQ(digits->decode(digits->encode("a 12345 b")), "a 12345 b");
}

// ------------------------------------------------------------------------------------------------
// llama2.c

#define TOK512_OR_SKIP(path)                                                                   \
  const std::string path = shared_model_file("stories260K/tok512.bin");                        \
  if (path.empty())                                                                            \
    GTEST_SKIP() << "missing " << attnscope::test::shared_models() << "/stories260K/tok512.bin";

struct RawVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

RawVocab read_raw_vocab(const std::string& path, int n) {
  const std::string b = read_file(path);
  RawVocab v;
  std::size_t off = 4;
  for (int i = 0; i < n; ++i) {
    float score;
    int32_t len;
    std::memcpy(&score, b.data() + off, 4);
    std::memcpy(&len, b.data() + off + 4, 4);
    off += 8;
    v.pieces.push_back(b.substr(off, len));
    v.scores.push_back(score);
    off += len;
  }
  return v;
}

// A line-by-line port of llama2.c run.c's encode(text, bos=0, eos=0), with its quadratic merge
// loop, as the reference for the tokenizer's faster merge.
Ids runc_encode(const RawVocab& v, const std::string& text) {
  auto lookup = [&](const std::string& s) -> int {
    for (std::size_t i = 0; i < v.pieces.size(); ++i)
      if (v.pieces[i] == s) return static_cast<int>(i);
    return -1;
  };
  std::vector<int> tokens;
  if (!text.empty()) tokens.push_back(lookup(" "));
  std::string buf;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c & 0xC0) != 0x80) buf.clear();
    buf += c;
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if ((next & 0xC0) == 0x80 && buf.size() < 4) continue;
    const int id = lookup(buf);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (char b : buf) tokens.push_back(static_cast<unsigned char>(b) + 3);
    }
    buf.clear();
  }
  while (true) {
    float best_score = -1e10;
    int best_id = -1, best_idx = -1;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int id = lookup(v.pieces[tokens[i]] + v.pieces[tokens[i + 1]]);
      if (id != -1 && v.scores[id] > best_score) {
        best_score = v.scores[id];
        best_id = id;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return Ids(tokens.begin(), tokens.end());
}

TEST(Llama2cTokenizer, StructureAndSpecialTokens) {
  TOK512_OR_SKIP(path);
  const auto tok = attnscope::load_llama2c_tokenizer(path, 512);
  EXPECT_EQ(tok->kind(), "llama2c");
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->encode_for_model(""), Ids{1});
  EXPECT_TRUE(tok->encode("").empty());

  // "Zoo": the dummy " " token leads, and the pieces spell " Zoo".
  const Ids zoo = tok->encode("Zoo");
  ASSERT_FALSE(zoo.empty());
  EXPECT_EQ(tok->piece(zoo[0]).front(), ' ');
  EXPECT_EQ(concat_pieces(*tok, zoo), " Zoo");
  const Ids zoo_model = tok->encode_for_model("Zoo");
  EXPECT_EQ(zoo_model.front(), 1);
  EXPECT_EQ(Ids(zoo_model.begin() + 1, zoo_model.end()), zoo);
  // The leading space is stripped only right after BOS, as run.c prints.
  EXPECT_EQ(tok->decode(zoo_model), "Zoo");
  EXPECT_EQ(tok->decode(zoo), " Zoo");
  EXPECT_EQ(tok->decode({1, 2}), "");
  EXPECT_EQ(tok->piece(1), "<s>");
}

TEST(Llama2cTokenizer, MatchesRunCEncodeAndRoundTrips) {
  TOK512_OR_SKIP(path);
  const auto tok = attnscope::load_llama2c_tokenizer(path, 512);
  const RawVocab raw = read_raw_vocab(path, 512);
  std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "  two leading spaces and trailing  ",
      "Lily's mom said, \"Let's go!\"\nShe smiled.",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 done",
      "x",
      "\n",
      "a\tb",
      // Repeated letters: equal-score candidates where run.c takes the leftmost.
      "Zooo boooo seeee lllll ttttttt aaaaaaa !!!!! ...... hmmmm",
  };
  for (const char* f : {"stories260K/reference_greedy_t0_n256_noprompt.txt",
                        "stories260K/reference_greedy_t0_n60_prompt_Zoo.txt"}) {
    const std::string p = shared_model_file(f);
    if (!p.empty()) texts.push_back(read_file(p));
  }
  for (const auto& s : texts) {
    const Ids ids = tok->encode(s);
    EXPECT_EQ(ids, runc_encode(raw, s)) << "text: " << s;
    EXPECT_EQ(tok->decode(tok->encode_for_model(s)), s);
  }
  // Merging really happened: far fewer tokens than bytes on story text.
  EXPECT_LT(tok->encode(texts[0]).size() * 2, texts[0].size());
}

TEST(Llama2cTokenizer, ByteFallbackForUnknownCharacters) {
  TOK512_OR_SKIP(path);
  const auto tok = attnscope::load_llama2c_tokenizer(path, 512);
  const std::string ri = "\xE6\x97\xA5";  // U+65E5, not among the 512 pieces
  const Ids ids = tok->encode(ri);
  // The dummy " " then the three bytes as <0xXX> tokens (id = byte + 3).
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok->piece(ids[0]), " ");
  EXPECT_EQ(ids[1], 0xE6 + 3);
  EXPECT_EQ(ids[2], 0x97 + 3);
  EXPECT_EQ(ids[3], 0xA5 + 3);
  EXPECT_EQ(tok->piece(ids[1]), "<0xE6>");
  EXPECT_EQ(tok->decode(tok->encode_for_model(ri)), ri);
  EXPECT_EQ(tok->decode(tok->encode_for_model("a" + ri + "b")), "a" + ri + "b");
}

// ------------------------------------------------------------------------------------------------
// SentencePiece-style BPE (Llama tokenizer.json)

const std::string kMeta = "\xE2\x96\x81";  // "▁"

// A tiny Llama-style vocabulary: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then pieces.
// Ids below are fixed by this layout.
enum : int64_t {
  kUnk = 0, kBos = 1, kEos = 2, kMetaId = 259, kH, kE, kL, kO, kW, kR, kD,
  kMetaH, kEl, kLo, kMetaHel, kMetaHello, kMetaW, kOr, kMetaWor, kLl
};

nlohmann::json llama_style_json(bool metaspace_form, bool merges_as_pairs) {
  using json = nlohmann::json;
  json vocab = json::object();
  vocab["<unk>"] = kUnk;
  vocab["<s>"] = kBos;
  vocab["</s>"] = kEos;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::vector<std::string> pieces = {kMeta, "h", "e", "l", "o", "w", "r", "d",
                                           kMeta + "h", "el", "lo", kMeta + "hel", kMeta + "hello",
                                           kMeta + "w", "or", kMeta + "wor", "ll"};
  for (std::size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = kMetaId + static_cast<int64_t>(i);
  // Rank order matters: "e l" before "l l", so "hell" becomes "▁hel" + "l", never "he" + "ll".
  const std::vector<std::pair<std::string, std::string>> merges = {
      {kMeta, "h"}, {"e", "l"}, {"l", "o"}, {kMeta + "h", "el"}, {kMeta + "hel", "lo"},
      {kMeta, "w"}, {"o", "r"}, {kMeta + "w", "or"}, {"l", "l"}};
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (merges_as_pairs)
      m.push_back({a, b});
    else
      m.push_back(a + " " + b);
  }
  json root;
  root["version"] = "1.0";
  root["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                          {{"id", 1}, {"content", "<s>"}, {"special", true}},
                          {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  if (metaspace_form) {
    // The older export: Metaspace pre-tokenizer and decoder, no normalizer.
    root["normalizer"] = nullptr;
    root["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta},
                             {"prepend_scheme", "first"}, {"split", true}};
    root["decoder"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}};
    root["post_processor"] = nullptr;
  } else {
    // Llama-2 as exported by transformers: Prepend + Replace normalizer, no pre-tokenizer.
    root["normalizer"] = {{"type", "Sequence"},
                          {"normalizers",
                           {{{"type", "Prepend"}, {"prepend", kMeta}},
                            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
    root["pre_tokenizer"] = nullptr;
    root["decoder"] = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    root["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  }
  root["model"] = {{"type", "BPE"},       {"unk_token", "<unk>"}, {"fuse_unk", true},
                   {"byte_fallback", true}, {"vocab", vocab},     {"merges", m}};
  return root;
}

std::unique_ptr<Tokenizer> load_json_tokenizer(const nlohmann::json& root, const std::string& tag) {
  const std::string dir = temp_dir(tag);
  std::ofstream(dir + "/tokenizer.json") << root.dump();
  return attnscope::load_hf_tokenizer(dir);
}

TEST(SentencePieceTokenizer, MergesByRankWithHandDerivedIds) {
  for (bool pairs : {false, true}) {
    const auto tok = load_json_tokenizer(llama_style_json(false, pairs), "sp_prepend");
    EXPECT_EQ(tok->kind(), "sentencepiece-bpe");
    EXPECT_EQ(tok->bos_id(), kBos);
    EXPECT_EQ(tok->eos_id(), kEos);
    EXPECT_TRUE(tok->adds_bos());
    EXPECT_EQ(tok->vocab_size(), kLl + 1);
    // "▁hello▁world": ▁h, el, lo, ▁hel, ▁hello, ▁w, or, ▁wor; "l d" and "▁hello ▁wor" never merge.
    EXPECT_EQ(tok->encode("hello world"), (Ids{kMetaHello, kMetaWor, kL, kD}));
    EXPECT_EQ(tok->encode_for_model("hello world"), (Ids{kBos, kMetaHello, kMetaWor, kL, kD}));
    // "e l" outranks "l l".
    EXPECT_EQ(tok->encode("hell"), (Ids{kMetaHel, kL}));
    EXPECT_EQ(tok->encode("ll"), (Ids{kMetaId, kLl}));
    // The Prepend normalizer adds "▁" even before a leading space.
    EXPECT_EQ(tok->encode(" hello"), (Ids{kMetaId, kMetaHello}));
    EXPECT_TRUE(tok->encode("").empty());
    EXPECT_EQ(tok->decode({kBos, kMetaHello, kMetaWor, kL, kD, kEos}), "hello world");
    EXPECT_EQ(tok->decode(tok->encode_for_model(" hello")), " hello");
    EXPECT_EQ(tok->piece(kMetaHello), " hello");
  }
}

TEST(SentencePieceTokenizer, ByteFallbackAndUnknowns) {
  auto root = llama_style_json(false, false);
  const auto tok = load_json_tokenizer(root, "sp_bytes");
  const std::string ri = "\xE6\x97\xA5";  // not in the vocabulary: three <0xXX> tokens
  EXPECT_EQ(tok->encode("h" + ri), (Ids{kMetaH, 3 + 0xE6, 3 + 0x97, 3 + 0xA5}));
  EXPECT_EQ(tok->decode(tok->encode_for_model("h" + ri + " hello")), "h" + ri + " hello");
  EXPECT_EQ(tok->encode("x"), (Ids{kMetaId, 3 + 'x'}));
  EXPECT_EQ(tok->piece(3 + 'x'), "x");
  EXPECT_EQ(tok->piece(3 + 0xE6), "<0xE6>");

  // Without byte fallback unknown characters become <unk>, consecutive ones fused into one.
  root["model"]["byte_fallback"] = false;
  const auto no_bytes = load_json_tokenizer(root, "sp_unk");
  EXPECT_EQ(no_bytes->kind(), "sentencepiece-bpe");  // still recognised by its "▁" normalizer
  EXPECT_EQ(no_bytes->encode("hxyz"), (Ids{kMetaH, kUnk}));
}

TEST(SentencePieceTokenizer, MetaspaceForm) {
  const auto tok = load_json_tokenizer(llama_style_json(true, false), "sp_metaspace");
  EXPECT_EQ(tok->kind(), "sentencepiece-bpe");
  EXPECT_EQ(tok->bos_id(), kBos);
  EXPECT_TRUE(tok->adds_bos());
  // Split into "▁hello" and "▁world" first; same ids as the unsplit form here.
  EXPECT_EQ(tok->encode("hello world"), (Ids{kMetaHello, kMetaWor, kL, kD}));
  // Metaspace adds the prefix only when the text does not already start with "▁".
  EXPECT_EQ(tok->encode(" hello"), (Ids{kMetaHello}));
  // Splitting keeps merges inside words: "▁h" + "▁hello" rather than anything spanning the "▁".
  EXPECT_EQ(tok->encode("h hello"), (Ids{kMetaH, kMetaHello}));
  EXPECT_EQ(tok->decode(tok->encode_for_model("hello world")), "hello world");
}

// ------------------------------------------------------------------------------------------------
// Trainer

// Deterministic pseudo-random text of lowercase words: half from a Zipf-like list of common words
// ("the" most frequent), half made of random syllables, so merges do not run out early.
std::string synthetic_text(std::size_t bytes, uint32_t seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "mat", "and", "a", "dog", "ran",
                                "to", "park", "she", "saw", "big", "red", "ball", "played",
                                "with", "it", "was", "happy", "little", "girl", "named", "lily"};
  static const char* syllables[] = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi",
                                    "ba", "de", "fo", "gu", "pe", "zi", "qua", "xo"};
  const int n = static_cast<int>(sizeof(words) / sizeof(words[0]));
  std::string out;
  uint32_t s = seed;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return (s >> 8) / double(1 << 24);
  };
  while (out.size() < bytes) {
    if (!out.empty()) out += ' ';
    if (next() < 0.5) {
      const double u = next();  // squaring a uniform draw favours low indices
      out += words[std::min(n - 1, static_cast<int>(u * u * n))];
    } else {
      const int k = 1 + static_cast<int>(next() * 3);
      for (int i = 0; i < k; ++i) out += syllables[static_cast<int>(next() * 16) & 15];
    }
  }
  return out;
}

// Naive BPE training over space-separated lowercase words, recounting every pair each step. With
// only [a-z] and ' ', GPT-2's regex gives the first word then " word" for each following word, and
// byte-level text is the same letters with "Ġ" for the space.
std::vector<std::string> naive_merges(const std::string& text, std::size_t target) {
  std::map<std::string, int64_t> counts;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start + 1);
    if (end == std::string::npos) end = text.size();
    ++counts[text.substr(start, end - start)];
    start = end;
  }
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<std::string> syms;
    for (char ch : w) syms.push_back(ch == ' ' ? "\xC4\xA0" : std::string(1, ch));
    words.push_back({syms, c});
  }
  std::set<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.insert(std::to_string(b));  // 256 byte tokens, by count only
  std::size_t vocab_size = 256;
  std::vector<std::string> merges;
  while (vocab_size < target) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [syms, c] : words)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += c;
    if (pairs.empty()) break;
    // Highest count; std::map order makes the first maximum the lexicographically smallest pair.
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    merges.push_back(a + " " + b);
    if (vocab.insert(a + b).second) ++vocab_size;
    for (auto& [syms, c] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = out;
    }
  }
  return merges;
}

TEST(BpeTrainer, TrainsReloadsAndRoundTrips) {
  const std::string text = synthetic_text(6000, 7) + "\nThe end. Numbers 1234 and caf\xC3\xA9!\n";
  const std::string dir = temp_dir("train");
  const std::string path = dir + "/tokenizer.json";
  attnscope::train_bytelevel_bpe(text, 400, path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const auto tok = attnscope::load_hf_tokenizer(dir);
  EXPECT_EQ(tok->kind(), "gpt2-bpe");
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->eos_id(), 399);
  EXPECT_EQ(tok->piece(399), "<|endoftext|>");
  EXPECT_EQ(tok->piece(0), "!");  // byte tokens in GPT-2's bytes_to_unicode order
  EXPECT_EQ(tok->piece(220), " ");  // the 68 unprintable bytes follow in byte order: 188 + 32

  // Held-out text, including characters the training text never had, round-trips exactly.
  for (const std::string& s : {std::string("the dog played with a red ball in the park"),
                              std::string("Zebra QUIZ \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80\n\t x"),
                              std::string("")}) {
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
  // Merges compress text like the training text well below one token per byte.
  const std::string sample = synthetic_text(2000, 99);
  EXPECT_LT(tok->encode(sample).size() * 3, sample.size());
  // The most frequent word becomes one token.
  ASSERT_EQ(tok->encode(" the").size(), 1u);
  EXPECT_EQ(tok->piece(tok->encode(" the")[0]), " the");

  // The file layout Hugging Face expects.
  const auto j = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 399);
  EXPECT_EQ(j["model"]["vocab"].size(), 400u);
}

TEST(BpeTrainer, DeterministicAndMatchesNaiveTraining) {
  const std::string text = synthetic_text(5000, 3);
  const std::string dir = temp_dir("train_det");
  attnscope::train_bytelevel_bpe(text, 420, dir + "/a.json");
  attnscope::train_bytelevel_bpe(text, 420, dir + "/b.json");
  const std::string a = read_file(dir + "/a.json");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_file(dir + "/b.json"));

  // The incremental pair counts give the same merges, in the same order, as recounting.
  const auto merges = nlohmann::json::parse(a)["model"]["merges"].get<std::vector<std::string>>();
  const auto naive = naive_merges(text, 419);
  EXPECT_GE(naive.size(), 419u - 256u);  // the text has enough pairs to fill the vocabulary
  EXPECT_EQ(merges, naive);
}

TEST(BpeTrainer, StopsWhenNoPairsAreLeft) {
  const std::string dir = temp_dir("train_small");
  // "ab ab ab" = "ab" + 2 x " ab": "a b" (count 3), then "Ġ ab" (count 2), then nothing.
  attnscope::train_bytelevel_bpe("ab ab ab", 1000, dir + "/tokenizer.json");
  const auto tok = attnscope::load_hf_tokenizer(dir);
  EXPECT_EQ(tok->vocab_size(), 256 + 2 + 1);
  EXPECT_EQ(tok->eos_id(), 258);
  EXPECT_EQ(tok->encode("ab ab"), (Ids{256, 257}));
}

// ------------------------------------------------------------------------------------------------
// Bad input

TEST(TokenizerErrors, MissingFilesNameThePath) {
  const std::string dir = temp_dir("tok_missing");
  const std::string nowhere = dir + "/nope.json";
  EXPECT_ERROR_MENTIONS(attnscope::load_gpt2_tokenizer(nowhere, dir + "/merges.txt"), nowhere);
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(dir + "/tok.bin", 512), dir + "/tok.bin");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), "no tokenizer found");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), dir);
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir + "/absent"), dir + "/absent");
  // vocab.json without merges.txt is not a tokenizer either.
  write_file(dir + "/vocab.json", "{}");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), "no tokenizer found");
}

TEST(TokenizerErrors, MalformedJsonNamesTheFile) {
  const std::string dir = temp_dir("tok_badjson");
  const std::string path = dir + "/tokenizer.json";
  write_file(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), path);

  write_file(path, R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), path);

  // A merge whose parts are not tokens.
  auto root = llama_style_json(false, false);
  root["model"]["merges"].push_back("q z");
  write_file(path, root.dump());
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), path);

  // Two tokens sharing an id.
  root = llama_style_json(false, false);
  root["model"]["vocab"]["zz"] = 260;
  write_file(path, root.dump());
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), "share id 260");

  // vocab.json that is not JSON, merges.txt with a bad line.
  fs::remove(path);
  write_file(dir + "/vocab.json", "not json");
  write_file(dir + "/merges.txt", "#version: 0.2\na b\n");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), dir + "/vocab.json");
  write_file(dir + "/vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  write_file(dir + "/merges.txt", "#version: 0.2\na b\nabc\n");
  EXPECT_ERROR_MENTIONS(attnscope::load_hf_tokenizer(dir), dir + "/merges.txt");
}

TEST(TokenizerErrors, BadLlama2cFiles) {
  TOK512_OR_SKIP(path);
  const std::string bytes = read_file(path);
  const std::string dir = temp_dir("tok_badbin");

  const std::string cut = dir + "/truncated.bin";
  write_file(cut, bytes.substr(0, bytes.size() / 2));
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(cut, 512), cut);
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(cut, 512), "truncated");

  // The file holds exactly 512 tokens: other vocab sizes do not fit it.
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(path, 500), "does not match");
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(path, 600), path);

  // A negative and a huge length in the first record.
  std::string neg = bytes;
  const int32_t minus = -5;
  std::memcpy(&neg[8], &minus, 4);
  write_file(dir + "/neg.bin", neg);
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(dir + "/neg.bin", 512), "negative");
  std::string huge = bytes;
  const int32_t big = 1 << 30;
  std::memcpy(&huge[8], &big, 4);
  write_file(dir + "/huge.bin", huge);
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(dir + "/huge.bin", 512), dir + "/huge.bin");

  write_file(dir + "/empty.bin", "");
  EXPECT_ERROR_MENTIONS(attnscope::load_llama2c_tokenizer(dir + "/empty.bin", 512), "too short");

  const auto tok = attnscope::load_llama2c_tokenizer(path, 512);
  EXPECT_ERROR_MENTIONS(tok->decode({5, 512}), path);
  EXPECT_ERROR_MENTIONS(tok->piece(-1), path);
}

TEST(TokenizerErrors, TrainerRejectsTinyVocab) {
  const std::string dir = temp_dir("train_bad");
  EXPECT_ERROR_MENTIONS(attnscope::train_bytelevel_bpe("some text", 100, dir + "/t.json"),
                        dir + "/t.json");
  EXPECT_FALSE(fs::exists(dir + "/t.json"));
  // An unwritable destination names the temporary file.
  EXPECT_ERROR_MENTIONS(
      attnscope::train_bytelevel_bpe("some text", 300, dir + "/no/such/dir/t.json"),
      dir + "/no/such/dir/t.json");
}

}  // namespace

}  // namespace test_tokenizers
