#include "attnscope/io/safetensors_stream_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"

namespace attnscope {

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, const std::vector<TensorEntry>& layout,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (TensorEntry e : layout) {
    e.begin = off;
    e.end = off + uint64_t(e.numel()) * dtype_size(e.dtype);
    off = e.end;
    h[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
    entries_[e.name] = e;
  }
  std::string json = h.dump();
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');  // align the data buffer to 8 bytes
  data_start_ = 8 + json.size();

  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) fail(tmp_, std::string("cannot create: ") + std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(json.size()) >> (8 * i));
  std::string head(reinterpret_cast<char*>(len), 8);
  head += json;
  if (::pwrite(fd_, head.data(), head.size(), 0) != ssize_t(head.size()) ||
      ::ftruncate(fd_, off_t(data_start_ + off)) != 0)
    fail(tmp_, std::string("write failed: ") + std::strerror(errno));
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void SafetensorsStreamWriter::write(const std::string& name, uint64_t offset, const void* data, uint64_t bytes) {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(tmp_, "no tensor '" + name + "' in the layout");
  if (offset + bytes > it->second.end - it->second.begin) fail(tmp_, "block past the end of '" + name + "'");
  const char* p = static_cast<const char*>(data);
  uint64_t pos = data_start_ + it->second.begin + offset;
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, off_t(pos));
    if (n <= 0) fail(tmp_, std::string("write failed: ") + std::strerror(errno));
    p += n, pos += n, bytes -= n;
  }
}

void SafetensorsStreamWriter::finish() {
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    fail(tmp_, std::string("cannot flush: ") + std::strerror(errno));
  }
  fd_ = -1;
  std::filesystem::rename(tmp_, path_);
}

}  // namespace attnscope
