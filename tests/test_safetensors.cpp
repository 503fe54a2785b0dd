// safetensors reading, writing, validation and the WeightStore.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_safetensors {

namespace fs = std::filesystem;
using attnscope::Error;
using attnscope::SafetensorsFile;
using attnscope::WeightStore;
using attnscope::write_safetensors;

namespace {

// ---- An independent minimal writer: the bytes a safetensors file consists of, built by hand. ----

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::string le16(uint16_t v) {
  return std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
}
// u64 header length, the header, the data buffer: nothing else.
std::string raw_file(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel() * c.element_size());
}

// The message of the attnscope::Error that `f` throws; a test failure when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an attnscope::Error";
  return "";
}

::testing::AssertionResult has(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << message << "\" does not contain \"" << part
                                       << "\"";
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Random, never all-zero test data in every dtype attnscope stores.
at::Tensor random_tensor(at::ScalarType type, at::IntArrayRef shape) {
  switch (type) {
    case at::kDouble:
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16: return at::randn(shape, at::TensorOptions().dtype(type));
    case at::kLong: return at::randint(-(int64_t{1} << 50), int64_t{1} << 50, shape, at::kLong);
    case at::kInt: return at::randint(-(int64_t{1} << 31), (int64_t{1} << 31) - 1, shape, at::kInt);
    case at::kShort: return at::randint(-32768, 32767, shape, at::kShort);
    case at::kChar: return at::randint(-128, 127, shape, at::kChar);
    case at::kByte: return at::randint(0, 256, shape, at::kByte);
    case at::kBool: return at::randint(0, 2, shape, at::kLong).to(at::kBool);
    default: throw std::logic_error("no random data for this dtype");
  }
}

}  // namespace

// ---- Round trips -------------------------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  at::manual_seed(1234);
  const std::vector<at::ScalarType> types = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16,
                                             at::kLong,   at::kInt,   at::kShort, at::kChar,
                                             at::kByte,   at::kBool};
  attnscope::NamedTensors in;
  for (at::ScalarType type : types) {
    const std::string name = c10::toString(type);
    at::Tensor t = random_tensor(type, {7, 5});
    ASSERT_TRUE(t.ne(0).any().item<bool>()) << name << ": random data is all zero";
    in.emplace_back(name, t);
    in.emplace_back(name + ".scalar", random_tensor(type, {}));       // 0-d
    in.emplace_back(name + ".empty", random_tensor(type, {0, 3}));    // no elements
    in.emplace_back(name + ".transposed", random_tensor(type, {4, 6}).t());  // not contiguous
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode, \"quoted\""}};
  const std::string path = attnscope::test::temp_dir("st_roundtrip") + "/all.safetensors";
  write_safetensors(path, in, meta);

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.entries().size(), in.size());
  for (const auto& [name, expected] : in) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    const at::Tensor got = f.tensor(name);
    EXPECT_EQ(got.scalar_type(), expected.scalar_type());
    EXPECT_EQ(got.sizes(), expected.sizes());
    EXPECT_EQ(bytes_of(got), bytes_of(expected));
  }
}

TEST(Safetensors, WrittenLayoutIsWhatOtherReadersRequire) {
  // HF's reader wants: header length a multiple of 8, tensors packed from offset 0 without gaps,
  // the last one ending at the end of the file; and every tensor aligned for its element type.
  at::manual_seed(7);
  const std::string path = attnscope::test::temp_dir("st_layout") + "/x.safetensors";
  write_safetensors(path, {{"u8", random_tensor(at::kByte, {3})},
                           {"f64", random_tensor(at::kDouble, {5})},
                           {"f16", random_tensor(at::kHalf, {3})},
                           {"i32", random_tensor(at::kInt, {1})}});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(bytes[8], '{');
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  const std::map<std::string, uint64_t> elem = {{"U8", 1}, {"F64", 8}, {"F16", 2}, {"I32", 4}};
  for (auto it = header.begin(); it != header.end(); ++it) {
    const uint64_t begin = it.value()["data_offsets"][0].get<uint64_t>();
    const uint64_t end = it.value()["data_offsets"][1].get<uint64_t>();
    EXPECT_EQ((8 + n + begin) % elem.at(it.value()["dtype"].get<std::string>()), 0u) << it.key();
    spans.emplace_back(begin, end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t expect_begin = 0;
  for (const auto& [begin, end] : spans) {
    EXPECT_EQ(begin, expect_begin);
    expect_begin = end;
  }
  EXPECT_EQ(8 + n + expect_begin, bytes.size());
}

TEST(Safetensors, EmptyFileListRoundTrips) {
  const std::string path = attnscope::test::temp_dir("st_none") + "/none.safetensors";
  write_safetensors(path, {});
  SafetensorsFile f(path);
  EXPECT_TRUE(f.entries().empty());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(read_bytes(path).size(), 16u);  // 8-byte length + "{}" padded to 8
}

TEST(Safetensors, TensorsAreViewsThatOutliveTheFileObject) {
  const std::string path = attnscope::test::temp_dir("st_view") + "/v.safetensors";
  const at::Tensor expected = at::arange(12, at::kFloat).reshape({3, 4});
  write_safetensors(path, {{"w", expected}});
  at::Tensor kept;
  {
    SafetensorsFile f(path);
    const at::Tensor a = f.tensor("w");
    const at::Tensor b = f.tensor("w");
    // Both view the same mapped bytes: nothing was copied.
    EXPECT_EQ(a.data_ptr(), b.data_ptr());
    kept = a;
  }
  // The SafetensorsFile is gone; the tensor's deleter still holds the mapping.
  EXPECT_TRUE(at::equal(kept, expected));
}

TEST(Safetensors, InPlaceWritesToViewsCopyAndLeaveTheFileUnchanged) {
  const std::string path = attnscope::test::temp_dir("st_cow") + "/w.safetensors";
  const at::Tensor expected = at::randn({4, 5});
  write_safetensors(path, {{"w", expected}});
  std::ifstream before_in(path, std::ios::binary);
  const std::string before(std::istreambuf_iterator<char>(before_in), {});
  {
    SafetensorsFile f(path);
    at::Tensor a = f.tensor("w");
    a.mul_(2);  // would fault on a read-only mapping
    EXPECT_TRUE(at::allclose(a, expected * 2));
    WeightStore store(path);
    at::Tensor w = store.get("w", {4, 5});
    w.add_(1);
    EXPECT_TRUE(at::allclose(w, expected + 1));
  }
  std::ifstream after_in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(after_in), {}), before);
  EXPECT_TRUE(at::equal(SafetensorsFile(path).tensor("w"), expected));
}

// ---- Reading bytes this test wrote by hand -------------------------------------------------------

TEST(Safetensors, ReadsHandWrittenFile) {
  const std::string header = "{\"a\":" + entry("I32", "[2,2]", 0, 16) +
                             ",\"__metadata__\":{\"k\":\"v\"},\"b\":" + entry("F32", "[3]", 16, 28) +
                             "}";
  const std::string data = le32(1) + le32(static_cast<uint32_t>(-2)) + le32(3) + le32(400000) +
                           le32(0x3FC00000) /* 1.5 */ + le32(0xC0000000) /* -2 */ +
                           le32(0x3E800000) /* 0.25 */;
  const std::string path = attnscope::test::temp_dir("st_hand") + "/hand.safetensors";
  write_bytes(path, raw_file(header, data));

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("k"), "v");
  const at::Tensor a = f.tensor("a");
  EXPECT_EQ(a.scalar_type(), at::kInt);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a[0][0].item<int32_t>(), 1);
  EXPECT_EQ(a[0][1].item<int32_t>(), -2);
  EXPECT_EQ(a[1][0].item<int32_t>(), 3);
  EXPECT_EQ(a[1][1].item<int32_t>(), 400000);
  const at::Tensor b = f.tensor("b");
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  EXPECT_EQ(b[0].item<float>(), 1.5f);
  EXPECT_EQ(b[1].item<float>(), -2.0f);
  EXPECT_EQ(b[2].item<float>(), 0.25f);
}

TEST(Safetensors, UnalignedDataIsCopiedToAlignedMemory) {
  // A header of 4k+1 bytes puts the buffer at an odd address; a U8 byte then shifts the I64 too.
  std::string header = "{\"f\":" + entry("F32", "[2]", 0, 8) + ",\"u\":" + entry("U8", "[1]", 8, 9) +
                       ",\"l\":" + entry("I64", "[1]", 9, 17) + "}";
  while (header.size() % 4 != 1) header += ' ';
  const std::string data = le32(0x3F800000) /* 1 */ + le32(0x40490FDB) /* pi */ + "\x07" +
                           le64(static_cast<uint64_t>(-1234567890123LL));
  const std::string path = attnscope::test::temp_dir("st_unaligned") + "/u.safetensors";
  write_bytes(path, raw_file(header, data));

  SafetensorsFile f(path);
  const at::Tensor t = f.tensor("f");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % alignof(float), 0u);
  EXPECT_EQ(t[0].item<float>(), 1.0f);
  EXPECT_EQ(t[1].item<float>(), 3.14159274f);
  EXPECT_EQ(f.tensor("u")[0].item<uint8_t>(), 7);
  const at::Tensor l = f.tensor("l");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(l.data_ptr()) % alignof(int64_t), 0u);
  EXPECT_EQ(l[0].item<int64_t>(), -1234567890123LL);
}

TEST(Safetensors, HalfAndBFloat16ConvertToFloat32) {
  // F16: 1, -2, 0.5, 65504 (largest half); BF16: 1, -2, 0.5, 3.140625.
  const std::string f16 = le16(0x3C00) + le16(0xC000) + le16(0x3800) + le16(0x7BFF);
  const std::string bf16 = le16(0x3F80) + le16(0xC000) + le16(0x3F00) + le16(0x4049);
  const std::string header =
      "{\"h\":" + entry("F16", "[4]", 0, 8) + ",\"b\":" + entry("BF16", "[2,2]", 8, 16) + "}";
  const std::string path = attnscope::test::temp_dir("st_half") + "/half.safetensors";
  write_bytes(path, raw_file(header, f16 + bf16));

  WeightStore store(path);
  const at::Tensor h = store.get("h", {4});
  EXPECT_EQ(h.scalar_type(), at::kFloat);
  const std::vector<float> want_h = {1.0f, -2.0f, 0.5f, 65504.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i].item<float>(), want_h[i]) << i;
  const at::Tensor b = store.get("b", {2, 2}).reshape({-1});
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  const std::vector<float> want_b = {1.0f, -2.0f, 0.5f, 3.140625f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b[i].item<float>(), want_b[i]) << i;
  // The raw file access keeps the stored dtype.
  EXPECT_EQ(SafetensorsFile(path).tensor("b").scalar_type(), at::kBFloat16);
}

// ---- Malformed files --------------------------------------------------------------------------

struct Malformed {
  const char* label;
  std::string bytes;
  std::vector<std::string> expect;  // substrings of the message, besides the path
};

TEST(Safetensors, MalformedFilesGiveSpecificErrors) {
  const std::string f32x2 = entry("F32", "[2]", 0, 8);
  const std::vector<Malformed> cases = {
      {"empty", "", {"empty"}},
      {"short", "\x01\x02\x03", {"too short", "3 bytes"}},
      {"length_past_eof", le64(1000) + "{}", {"header length 1000", "past the end of the file"}},
      {"length_implausible", le64(uint64_t{1} << 40) + "{}", {"implausible"}},
      {"header_empty", le64(0), {"header is empty"}},
      {"not_json", raw_file("{\"a\": nope}"), {"not valid JSON"}},
      {"not_object", raw_file("[1,2,3]"), {"not a JSON object"}},
      {"entry_not_object", raw_file("{\"a\":5}"), {"tensor 'a'", "not a JSON object"}},
      {"unknown_dtype", raw_file("{\"a\":" + entry("Q4", "[1]", 0, 1) + "}", "x"),
       {"tensor 'a'", "unknown dtype \"Q4\""}},
      {"negative_dim", raw_file("{\"a\":" + entry("F32", "[-1]", 0, 0) + "}"),
       {"tensor 'a'", "not a non-negative integer"}},
      {"fractional_dim", raw_file("{\"a\":" + entry("F32", "[1.5]", 0, 4) + "}", "xxxx"),
       {"tensor 'a'", "not a non-negative integer"}},
      {"shape_overflow",
       raw_file("{\"a\":" + entry("F32", "[0,4294967296,4294967296]", 0, 0) + "}"),
       {"tensor 'a'", "shape overflows"}},
      {"span_mismatch", raw_file("{\"a\":" + entry("F32", "[2]", 0, 4) + "}", "xxxx"),
       {"tensor 'a'", "needs 8 bytes but data_offsets span 4"}},
      {"end_before_begin", raw_file("{\"a\":" + entry("F32", "[2]", 8, 4) + "}", "xxxxxxxx"),
       {"tensor 'a'", "end before they begin"}},
      {"truncated_buffer", raw_file("{\"a\":" + entry("F32", "[4]", 0, 16) + "}", "12345678"),
       {"tensor 'a'", "ends at byte 16 of a data buffer of 8 bytes", "truncated"}},
      {"overlap",
       raw_file("{\"a\":" + f32x2 + ",\"b\":" + entry("F32", "[2]", 4, 12) + "}",
                std::string(12, 'x')),
       {"'a' and 'b' overlap"}},
      {"duplicate_tensor", raw_file("{\"a\":" + f32x2 + ",\"a\":" + f32x2 + "}", "xxxxxxxx"),
       {"key 'a' more than once"}},
      {"metadata_not_string", raw_file("{\"__metadata__\":{\"k\":1}}"),
       {"metadata value for 'k' is not a string"}},
      {"metadata_not_object", raw_file("{\"__metadata__\":[\"k\"]}"),
       {"\"__metadata__\" is not an object"}},
      {"missing_dtype", raw_file("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "xxxxxxxx"),
       {"tensor 'a'", "\"dtype\""}},
      {"missing_shape", raw_file("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", "xxxxxxxx"),
       {"tensor 'a'", "\"shape\""}},
      {"missing_offsets", raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", "xxxxxxxx"),
       {"tensor 'a'", "\"data_offsets\""}},
      {"negative_offset", raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}"),
       {"tensor 'a'", "\"data_offsets\" must be two non-negative integers"}},
      {"three_offsets",
       raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "x"),
       {"tensor 'a'", "\"data_offsets\" must be two non-negative integers"}},
  };
  const std::string dir = attnscope::test::temp_dir("st_malformed");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir + "/" + c.label + ".safetensors";
    write_bytes(path, c.bytes);
    const std::string message = error_of([&] { SafetensorsFile f(path); });
    EXPECT_TRUE(has(message, path));
    for (const auto& part : c.expect) EXPECT_TRUE(has(message, part));
    // WeightStore goes through the same checks.
    EXPECT_TRUE(has(error_of([&] { WeightStore s(path); }), path));
  }
}

TEST(Safetensors, MissingFileAndDirectory) {
  const std::string dir = attnscope::test::temp_dir("st_missing");
  const std::string missing = dir + "/nope.safetensors";
  std::string message = error_of([&] { SafetensorsFile f(missing); });
  EXPECT_TRUE(has(message, missing));
  EXPECT_TRUE(has(message, "no such file"));
  message = error_of([&] { SafetensorsFile f(dir); });
  EXPECT_TRUE(has(message, dir));
  EXPECT_TRUE(has(message, "is a directory"));
  message = error_of([&] { WeightStore s(missing); });
  EXPECT_TRUE(has(message, missing));
  EXPECT_TRUE(has(message, "no such file or directory"));
}

TEST(Safetensors, BoolBytesOtherThanZeroOrOneAreRefused) {
  const std::string path = attnscope::test::temp_dir("st_bool") + "/b.safetensors";
  write_bytes(path, raw_file("{\"m\":" + entry("BOOL", "[3]", 0, 3) + "}", std::string("\x01\x00\x02", 3)));
  SafetensorsFile f(path);  // the header is fine; the data is not
  const std::string message = error_of([&] { f.tensor("m"); });
  EXPECT_TRUE(has(message, path));
  EXPECT_TRUE(has(message, "tensor 'm'"));
  EXPECT_TRUE(has(message, "byte 2"));
}

TEST(Safetensors, AbsentTensorNamesFileAndTensor) {
  const std::string path = attnscope::test::temp_dir("st_absent") + "/a.safetensors";
  write_safetensors(path, {{"w", at::ones({2})}});
  std::string message = error_of([&] { SafetensorsFile(path).tensor("nope"); });
  EXPECT_TRUE(has(message, path));
  EXPECT_TRUE(has(message, "'nope'"));
  message = error_of([&] { WeightStore(path).get("nope"); });
  EXPECT_TRUE(has(message, path));
  EXPECT_TRUE(has(message, "'nope'"));
}

// ---- WeightStore checks -----------------------------------------------------------------------

TEST(WeightStore, RejectsNaNAndInf) {
  const std::string path = attnscope::test::temp_dir("st_nan") + "/w.safetensors";
  at::Tensor nan = at::ones({2, 2});
  nan[1][0] = std::numeric_limits<float>::quiet_NaN();
  at::Tensor inf = at::ones({3}, at::kHalf);
  inf[2] = -std::numeric_limits<float>::infinity();
  // 1e300 is finite as float64 but not as float32.
  const at::Tensor big = at::full({2}, 1e300, at::kDouble);
  write_safetensors(path, {{"nan", nan}, {"inf", inf}, {"big", big}, {"ok", at::ones({2})},
                           {"ints", at::arange(4, at::kInt)}});
  WeightStore store(path);

  std::string message = error_of([&] { store.get("nan"); });
  EXPECT_TRUE(has(message, path));
  EXPECT_TRUE(has(message, "tensor 'nan'"));
  EXPECT_TRUE(has(message, "1 non-finite values (NaN or Inf)"));
  EXPECT_TRUE(has(message, "flat index 2"));
  message = error_of([&] { store.get("inf"); });
  EXPECT_TRUE(has(message, "tensor 'inf'"));
  EXPECT_TRUE(has(message, "flat index 2"));
  message = error_of([&] { store.get("big"); });
  EXPECT_TRUE(has(message, "tensor 'big'"));
  EXPECT_TRUE(has(message, "2 non-finite"));
  EXPECT_TRUE(at::equal(store.get("ok"), at::ones({2})));
  EXPECT_TRUE(at::equal(store.get("ints"), at::arange(4, at::kFloat)));
  // Raw access does not judge the values.
  EXPECT_TRUE(at::isnan(SafetensorsFile(path).tensor("nan")).any().item<bool>());
}

TEST(WeightStore, ShapeMismatchNamesBothShapes) {
  const std::string path = attnscope::test::temp_dir("st_shape") + "/w.safetensors";
  write_safetensors(path, {{"layer.w", at::randn({2, 3})}});
  WeightStore store(path);
  EXPECT_EQ(store.get("layer.w", {2, 3}).sizes(), (std::vector<int64_t>{2, 3}));
  const std::string message = error_of([&] { store.get("layer.w", {3, 2}); });
  EXPECT_TRUE(has(message, path));
  EXPECT_TRUE(has(message, "tensor 'layer.w'"));
  EXPECT_TRUE(has(message, "expected shape [3, 2]"));
  EXPECT_TRUE(has(message, "the file has [2, 3]"));
}

namespace {
const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";

void write_index(const std::string& dir, const nlohmann::json& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", 123}}}, {"weight_map", weight_map}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
}
}  // namespace

TEST(WeightStore, ShardedCheckpoint) {
  at::manual_seed(3);
  const std::string dir = attnscope::test::temp_dir("st_sharded");
  const at::Tensor a = at::randn({2, 3});
  const at::Tensor b = at::randn({4}).to(at::kBFloat16);
  const at::Tensor c = at::randint(-100, 100, {3}, at::kLong);
  write_safetensors(dir + "/" + kShard1, {{"a", a}, {"b", b}});
  write_safetensors(dir + "/" + kShard2, {{"c", c}});
  write_index(dir, {{"a", kShard1}, {"b", kShard1}, {"c", kShard2}});

  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    SCOPED_TRACE(path);
    WeightStore store(path);
    EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(store.files(),
              (std::vector<std::string>{dir + "/" + kShard1, dir + "/" + kShard2}));
    EXPECT_TRUE(store.contains("c"));
    EXPECT_FALSE(store.contains("d"));
    EXPECT_NO_THROW(store.validate_all());
    EXPECT_TRUE(at::equal(store.get("a", {2, 3}), a));
    EXPECT_TRUE(at::equal(store.get("b"), b.to(at::kFloat)));
    EXPECT_TRUE(at::equal(store.get("c"), c.to(at::kFloat)));
  }
}

TEST(WeightStore, IndexNamingMissingShardFailsValidation) {
  const std::string dir = attnscope::test::temp_dir("st_noshard");
  write_safetensors(dir + "/" + kShard1, {{"a", at::ones({2})}});
  write_index(dir, {{"a", kShard1}, {"c", kShard2}});
  WeightStore store(dir);  // shards open lazily, so this still works
  EXPECT_TRUE(at::equal(store.get("a"), at::ones({2})));
  const std::string message = error_of([&] { store.validate_all(); });
  EXPECT_TRUE(has(message, dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(has(message, std::string("shard '") + kShard2 + "'"));
  EXPECT_TRUE(has(message, "tensor 'c'"));
  EXPECT_TRUE(has(message, "does not exist"));
  EXPECT_TRUE(has(error_of([&] { store.get("c"); }), "does not exist"));
}

TEST(WeightStore, IndexNamingAbsentTensorFailsValidation) {
  const std::string dir = attnscope::test::temp_dir("st_notensor");
  write_safetensors(dir + "/" + kShard1, {{"a", at::ones({2})}});
  write_safetensors(dir + "/" + kShard2, {{"c", at::ones({2})}});
  write_index(dir, {{"a", kShard1}, {"c", kShard2}, {"d", kShard1}});
  WeightStore store(dir);
  const std::string message = error_of([&] { store.validate_all(); });
  EXPECT_TRUE(has(message, "model.safetensors.index.json"));
  EXPECT_TRUE(has(message, "tensor 'd'"));
  EXPECT_TRUE(has(message, dir + "/" + kShard1));
  EXPECT_TRUE(has(message, "does not contain it"));
  const std::string get_message = error_of([&] { store.get("d"); });
  EXPECT_TRUE(has(get_message, dir + "/" + kShard1));
  EXPECT_TRUE(has(get_message, "absent from the file"));
}

TEST(WeightStore, MalformedIndex) {
  const std::string dir = attnscope::test::temp_dir("st_badindex");
  const std::string index = dir + "/model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"weight_map\": ", "not valid JSON"},
      {"[]", "not a JSON object"},
      {"{\"metadata\": {}}", "no \"weight_map\" object"},
      {"{\"weight_map\": {\"a\": 3}}", "entry for 'a' is not a file name string"},
      {"{\"weight_map\": {\"a\": \"../elsewhere.safetensors\"}}", "not a file inside"},
      {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "not a file inside"},
      {"{\"weight_map\": {}}", "lists no tensors"},
  };
  for (const auto& [text, expect] : cases) {
    SCOPED_TRACE(text);
    std::ofstream(index) << text;
    const std::string message = error_of([&] { WeightStore s(dir); });
    EXPECT_TRUE(has(message, index));
    EXPECT_TRUE(has(message, expect));
  }
}

TEST(WeightStore, DirectoryResolution) {
  const std::string dir = attnscope::test::temp_dir("st_dir");
  // Nothing there.
  std::string message = error_of([&] { WeightStore s(dir); });
  EXPECT_TRUE(has(message, dir));
  EXPECT_TRUE(has(message, "has no model.safetensors or model.safetensors.index.json"));
  // Some other safetensors name: pointed at.
  write_safetensors(dir + "/consolidated.safetensors", {{"w", at::ones({1})}});
  message = error_of([&] { WeightStore s(dir); });
  EXPECT_TRUE(has(message, "consolidated.safetensors"));
  // model.safetensors is found.
  write_safetensors(dir + "/model.safetensors", {{"w", at::full({2}, 5.0)}});
  WeightStore store(dir);
  EXPECT_EQ(store.source(), (fs::path(dir) / "model.safetensors").string());
  EXPECT_EQ(store.names(), std::vector<std::string>{"w"});
  EXPECT_TRUE(at::equal(store.get("w"), at::full({2}, 5.0)));
}

TEST(WeightStore, RefusesPickleCheckpoints) {
  const std::string dir = attnscope::test::temp_dir("st_pickle");
  // A zip-format torch.save checkpoint starts like this; the content must never matter.
  write_bytes(dir + "/pytorch_model.bin", std::string("PK\x03\x04pickle", 10));
  write_bytes(dir + "/extra.pth", "\x80\x02}q\x00.");
  for (const std::string& path : {dir, dir + "/pytorch_model.bin", dir + "/extra.pth"}) {
    SCOPED_TRACE(path);
    const std::string message = error_of([&] { WeightStore s(path); });
    EXPECT_TRUE(has(message, path));
    EXPECT_TRUE(has(message, "pickle"));
    EXPECT_TRUE(has(message, "unpickling executes code"));
    EXPECT_TRUE(has(message, "convert"));
    EXPECT_TRUE(has(message, "safetensors"));
  }
  EXPECT_TRUE(has(error_of([&] { WeightStore s(dir); }), "pytorch_model.bin"));
}

// ---- Writer failures --------------------------------------------------------------------------

TEST(SafetensorsWriter, FailedWriteLeavesExistingFileIntact) {
  const std::string path = attnscope::test::temp_dir("st_atomic") + "/keep.safetensors";
  write_safetensors(path, {{"old", at::randn({4, 4})}}, {{"version", "1"}});
  const std::string before = read_bytes(path);
  ASSERT_FALSE(before.empty());

  auto expect_intact = [&](const std::string& message, const std::string& why) {
    EXPECT_TRUE(has(message, path));
    EXPECT_TRUE(has(message, why));
    EXPECT_EQ(read_bytes(path), before);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  };
  expect_intact(error_of([&] {
                  write_safetensors(path, {{"fine", at::randn({8})},
                                           {"z", at::randn({2}, at::kComplexFloat)}});
                }),
                "tensor 'z': has dtype ComplexFloat");
  expect_intact(error_of([&] {
                  write_safetensors(path, {{"x", at::ones({1})}, {"x", at::zeros({1})}});
                }),
                "tensor 'x': is given more than once");
  expect_intact(error_of([&] { write_safetensors(path, {{"__metadata__", at::ones({1})}}); }),
                "reserved");
  expect_intact(error_of([&] { write_safetensors(path, {{"u", at::Tensor()}}); }), "undefined");
  expect_intact(error_of([&] { write_safetensors(path, {{std::string("bad\xff"), at::ones({1})}}); }),
                "UTF-8");
  EXPECT_EQ(SafetensorsFile(path).metadata().at("version"), "1");
}

TEST(SafetensorsWriter, FailedRenameRemovesTemporaryFile) {
  // The target is a non-empty directory: the data is written to the .tmp, then rename fails.
  const std::string dir = attnscope::test::temp_dir("st_rename");
  const std::string path = dir + "/occupied";
  fs::create_directories(path + "/inside");
  const std::string message =
      error_of([&] { write_safetensors(path, {{"w", at::ones({16})}}); });
  EXPECT_TRUE(has(message, "cannot rename"));
  EXPECT_TRUE(has(message, path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(fs::is_directory(path + "/inside"));
}

TEST(SafetensorsWriter, StaleTemporaryFileIsReplaced) {
  const std::string path = attnscope::test::temp_dir("st_stale") + "/w.safetensors";
  write_bytes(path + ".tmp", "left over from a crash");
  write_safetensors(path, {{"w", at::arange(3, at::kFloat)}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(at::equal(SafetensorsFile(path).tensor("w"), at::arange(3, at::kFloat)));
}

}  // namespace test_safetensors
