#include "attnscope/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/base/shape_str.h"

// safetensors data is little-endian and is handed to torch without byte swapping.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "attnscope reads safetensors natively");

namespace fs = std::filesystem;

namespace attnscope {

namespace {

at::ScalarType scalar_type_of(DType t) {
  switch (t) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  return at::kFloat;  // unreachable: the switch covers every DType
}

bool dtype_of(at::ScalarType t, DType* out) {
  switch (t) {
    case at::kDouble: *out = DType::F64; return true;
    case at::kFloat: *out = DType::F32; return true;
    case at::kHalf: *out = DType::F16; return true;
    case at::kBFloat16: *out = DType::BF16; return true;
    case at::kLong: *out = DType::I64; return true;
    case at::kInt: *out = DType::I32; return true;
    case at::kShort: *out = DType::I16; return true;
    case at::kChar: *out = DType::I8; return true;
    case at::kByte: *out = DType::U8; return true;
    case at::kBool: *out = DType::BOOL; return true;
    default: return false;
  }
}

// Extensions of pickle-based checkpoints (torch.save and friends).
bool is_pickle_name(const fs::path& p) {
  static const std::set<std::string> kPickle = {".bin", ".pt", ".pth", ".ckpt", ".pkl"};
  return kPickle.count(p.extension().string()) > 0;
}

const char* kPickleRefusal =
    "attnscope refuses pickle checkpoints because unpickling executes code from the file; convert "
    "the checkpoint to safetensors in a trusted environment (e.g. transformers' "
    "save_pretrained(..., safe_serialization=True) or safetensors.torch.save_file) and pass the "
    "model.safetensors instead";

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  return s.str();
}

// Shard names come from a JSON file and are joined to its directory: keep them inside it.
bool is_safe_shard_name(const std::string& name) {
  if (name.empty()) return false;
  const fs::path p(name);
  if (p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

// write(2) until everything is out: it may write less than asked, or be interrupted.
bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Mapping {
  const uint8_t* data = nullptr;
  std::size_t size = 0;
  Mapping(const uint8_t* d, std::size_t s) : data(d), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(const_cast<uint8_t*>(data), size); }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail(path, "no such file");
  if (ec) fail(path, "cannot access: " + ec.message());
  if (fs::is_directory(st)) fail(path, "is a directory, not a safetensors file");
  if (!fs::is_regular_file(st)) fail(path, "is not a regular file");

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  const auto size = static_cast<std::size_t>(sb.st_size);
  // mmap refuses a zero length, and "empty" is the more useful message anyway.
  if (size == 0) {
    ::close(fd);
    fail(path, "file is empty (0 bytes), not a safetensors file");
  }
  // Private and writable: an in-place op on a returned view copies the touched pages (copy on
  // write) instead of faulting; the file itself is never modified.
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (addr == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(err));
  map_ = std::make_shared<Mapping>(static_cast<const uint8_t*>(addr), size);

  header_ = parse_safetensors_header(map_->data, map_->size, path);
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) by_name_[header_.tensors[i].name] = i;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (!e) fail(path_, "no tensor named '" + name + "'");
  const auto options = at::TensorOptions().dtype(scalar_type_of(e->dtype));
  const uint8_t* data = map_->data + header_.data_offset + e->begin;
  const std::size_t nbytes = e->end - e->begin;

  // torch assumes a bool byte is 0 or 1; anything else is undefined behaviour in its kernels.
  if (e->dtype == DType::BOOL)
    for (std::size_t i = 0; i < nbytes; ++i)
      if (data[i] > 1)
        fail(path_ + ": tensor '" + name + "'",
             "BOOL data holds the byte " + std::to_string(data[i]) + " (only 0 and 1 are valid)");

  if (nbytes == 0) return at::empty(e->shape, options);
  // safetensors does not promise alignment (HF's writer aligns, others may not); torch kernels
  // assume it, so a misaligned tensor is copied into fresh, aligned memory.
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(e->dtype) != 0) {
    at::Tensor copy = at::empty(e->shape, options);
    std::memcpy(copy.data_ptr(), data, nbytes);
    return copy;
  }
  // The deleter owns a reference to the mapping: the view stays valid after this object is gone.
  std::shared_ptr<Mapping> keep = map_;
  return at::from_blob(const_cast<uint8_t*>(data), e->shape, [keep](void*) {}, options);
}

// ---------------------------------------------------------------------------------------------
// WeightStore

WeightStore::WeightStore(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (st.type() == fs::file_type::not_found) fail(path, "no such file or directory");
  if (ec) fail(path, "cannot access: " + ec.message());

  fs::path single;  // a lone .safetensors file
  fs::path index;   // a model.safetensors.index.json
  if (fs::is_directory(st)) {
    // Same preference as transformers: the single file first, then the sharded index.
    if (fs::exists(p / "model.safetensors")) {
      single = p / "model.safetensors";
    } else if (fs::exists(p / "model.safetensors.index.json")) {
      index = p / "model.safetensors.index.json";
    } else {
      std::vector<std::string> pickles, others;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        const fs::path name = entry.path().filename();
        if (is_pickle_name(name)) pickles.push_back(name.string());
        if (name.extension() == ".safetensors") others.push_back(name.string());
      }
      std::sort(pickles.begin(), pickles.end());
      std::sort(others.begin(), others.end());
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
        return s;
      };
      if (!others.empty())
        fail(path, "has no model.safetensors or model.safetensors.index.json; it holds " +
                       join(others) + ": pass one of those files directly");
      if (!pickles.empty())
        fail(path, "holds only pickle checkpoints (" + join(pickles) + "); " + kPickleRefusal);
      fail(path, "has no model.safetensors or model.safetensors.index.json");
    }
  } else if (is_pickle_name(p.filename())) {
    fail(path, std::string("is a pickle checkpoint; ") + kPickleRefusal);
  } else if (p.extension() == ".json") {
    index = p;
  } else {
    single = p;
  }

  if (!single.empty()) {
    source_ = single.string();
    dir_ = single.parent_path().string();
    const std::string key = single.filename().string();
    auto file = std::make_unique<SafetensorsFile>(source_);
    for (const auto& e : file->entries()) weight_map_[e.name] = key;
    open_[key] = std::move(file);
    return;
  }

  source_ = index.string();
  dir_ = index.parent_path().string();
  const std::string text = read_text_file(source_);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(source_, "index is not valid JSON");
  if (!j.is_object()) fail(source_, "index is not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) fail(source_, "index has no \"weight_map\" object");
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      fail(source_, "weight_map entry for '" + it.key() + "' is not a file name string");
    const std::string shard = it->get<std::string>();
    if (!is_safe_shard_name(shard))
      fail(source_, "weight_map entry for '" + it.key() + "' names '" + shard +
                        "', which is not a file inside the index's directory");
    weight_map_[it.key()] = shard;
  }
  if (weight_map_.empty()) fail(source_, "index lists no tensors");
}

bool WeightStore::contains(const std::string& name) const { return weight_map_.count(name) > 0; }

const SafetensorsFile& WeightStore::file_for(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) fail(source_, "no tensor named '" + name + "'");
  auto open = open_.find(it->second);
  if (open != open_.end()) return *open->second;
  const fs::path full = fs::path(dir_) / it->second;
  // Say which index entry pointed at the missing shard, not just that a file is missing.
  if (!fs::exists(full))
    fail(source_, "shard '" + it->second + "' (listed for tensor '" + name +
                      "') does not exist: " + full.string());
  auto file = std::make_unique<SafetensorsFile>(full.string());
  const SafetensorsFile& ref = *file;
  open_.emplace(it->second, std::move(file));
  return ref;
}

namespace {

// The flat index of the first NaN or Inf in a floating tensor (-1 when none) and how many there
// are, read in the stored dtype: an exponent of all ones is Inf or NaN in F16, BF16, F32 and F64
// alike. One pass over the bytes without a converted copy (a weight of a billion elements would
// otherwise take gigabytes to check).
template <class U>
std::pair<int64_t, int64_t> non_finite(const at::Tensor& t, U exponent) {
  const U* p = static_cast<const U*>(t.data_ptr());
  const int64_t n = t.numel();
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < n; ++i)
    if ((p[i] & exponent) == exponent) {
      if (first < 0) first = i;
      ++count;
    }
  return {first, count};
}

void check_finite(const at::Tensor& stored, const std::string& where) {
  at::Tensor t = stored.contiguous();
  std::pair<int64_t, int64_t> bad{-1, 0};
  switch (t.scalar_type()) {
    case at::kHalf: bad = non_finite<uint16_t>(t, 0x7C00); break;
    case at::kBFloat16: bad = non_finite<uint16_t>(t, 0x7F80); break;
    case at::kFloat: bad = non_finite<uint32_t>(t, 0x7F800000u); break;
    case at::kDouble: {
      // Finite as float64 but beyond float32's range is Inf once computed in float32.
      const at::Tensor f = t.to(at::kFloat);
      bad = non_finite<uint32_t>(f, 0x7F800000u);
      break;
    }
    default: return;  // integers cannot hold NaN or Inf
  }
  if (bad.second > 0)
    fail(where, "has " + std::to_string(bad.second) + " non-finite values (NaN or Inf" +
                    std::string(t.scalar_type() == at::kDouble ? " as float32" : "") + "), the first at flat index " +
                    std::to_string(bad.first));
}

}  // namespace

at::Tensor WeightStore::checked(const std::string& name, const std::vector<int64_t>& shape, std::string* where_out) const {
  const SafetensorsFile& file = file_for(name);
  const std::string where = file.path() + ": tensor '" + name + "'";
  if (!file.contains(name)) fail(where, "is listed in " + source_ + " but absent from the file");
  at::Tensor t = file.tensor(name);
  if (!shape.empty() && !t.sizes().equals(shape))
    fail(where, "expected shape " + shape_str(shape) + " but the file has " + shape_str(t.sizes()));
  check_finite(t, where);
  if (where_out) *where_out = where;
  return t;
}

at::Tensor WeightStore::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const at::Tensor t = checked(name, shape, nullptr);
  return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
}

at::Tensor WeightStore::as_stored(const std::string& name, const std::vector<int64_t>& shape) const {
  return checked(name, shape, nullptr);
}

std::vector<TensorEntry> WeightStore::entries() const {
  std::vector<TensorEntry> out;
  out.reserve(weight_map_.size());
  for (const auto& [name, shard] : weight_map_) {
    const SafetensorsFile& file = file_for(name);
    const TensorEntry* e = file.find(name);
    if (!e)
      fail(source_, "tensor '" + name + "' is listed in shard '" + shard + "' but " + file.path() + " does not contain it");
    out.push_back(*e);
  }
  return out;
}

at::Tensor WeightStore::stored(const std::string& name, const std::vector<int64_t>& shape) const {
  std::string where;
  const at::Tensor t = checked(name, shape, &where);
  switch (t.scalar_type()) {
    case at::kFloat: case at::kHalf: case at::kBFloat16: return t;
    case at::kDouble: return t.to(at::kFloat);  // no model computes in float64: store it as float32
    default: fail(where, "holds " + std::string(t.dtype().name()) + " values; a weight must be F32, F16 or BF16 (or F64)");
  }
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(weight_map_.size());
  for (const auto& kv : weight_map_) out.push_back(kv.first);
  return out;
}

std::vector<std::string> WeightStore::files() const {
  std::set<std::string> unique;
  for (const auto& kv : weight_map_) unique.insert((fs::path(dir_) / kv.second).string());
  return {unique.begin(), unique.end()};
}

void WeightStore::validate_all() const {
  for (const auto& [name, shard] : weight_map_) {
    const SafetensorsFile& file = file_for(name);  // opens (and parses) each shard once
    if (!file.contains(name))
      fail(source_, "tensor '" + name + "' is listed in shard '" + shard + "' but " + file.path() +
                        " does not contain it");
  }
}

// ---------------------------------------------------------------------------------------------
// write_safetensors

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Everything that can fail for a reason other than I/O is checked before the disk is touched.
  struct Item {
    std::string name;
    DType dtype;
    at::Tensor data;  // contiguous, CPU
  };
  std::vector<Item> items;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") fail(where, "the name is reserved for the header's metadata");
    if (!seen.insert(name).second) fail(where, "is given more than once");
    if (!t.defined()) fail(where, "is undefined");
    if (t.layout() != at::kStrided) fail(where, "is not a dense tensor");
    DType dtype;
    if (!dtype_of(t.scalar_type(), &dtype))
      fail(where, std::string("has dtype ") + c10::toString(t.scalar_type()) +
                      ", which attnscope cannot store in safetensors");
    at::Tensor cpu;
    try {
      cpu = t.to(at::kCPU).contiguous();
    } catch (const c10::Error& e) {
      fail(where, std::string("cannot be copied to the CPU: ") + e.what_without_backtrace());
    }
    items.push_back({name, dtype, cpu});
  }
  // Largest elements first: every offset is then a multiple of the element size that follows,
  // so each tensor is aligned without gaps (HF's reader rejects gaps between tensors).
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& item : items) {
    const uint64_t nbytes = static_cast<uint64_t>(item.data.numel()) * dtype_size(item.dtype);
    header[item.name] = {{"dtype", dtype_name(item.dtype)},
                         {"shape", item.data.sizes().vec()},
                         {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("cannot encode the header (names and metadata must be UTF-8): ") +
                   e.what());
  }
  // Pad with spaces (valid JSON whitespace) so the data buffer starts 8-byte aligned, as HF does.
  json.append((8 - json.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{json.size()} >> (8 * i));

  // Write a sibling temporary file and rename it over `path`: rename is atomic, so readers see the
  // old file or the complete new one. O_NOFOLLOW: never write through a stale symlink.
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp + ": " + std::strerror(errno));
  auto abandon = [&](const std::string& what) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, what);
  };
  auto io_error = [&](const std::string& action) {
    return action + " " + tmp + ": " + std::strerror(errno);
  };
  if (!write_all(fd, length, sizeof length) || !write_all(fd, json.data(), json.size()))
    abandon(io_error("cannot write the header to"));
  for (const auto& item : items)
    if (!write_all(fd, item.data.data_ptr(), item.data.numel() * dtype_size(item.dtype)))
      abandon(io_error("cannot write tensor '" + item.name + "' to"));
  // Flush before renaming, or a crash could leave the new name pointing at unwritten blocks.
  if (::fsync(fd) != 0) abandon(io_error("cannot flush"));
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon(io_error("cannot close"));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) abandon("cannot rename " + tmp + " over " + path + ": " + ec.message());
}

}  // namespace attnscope
