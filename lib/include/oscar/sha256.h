// SHA-256 (FIPS 180-4) for the identities and checksums that the project's file formats carry.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace oscar {

// Incremental SHA-256. Self-contained so that the Torch-free runtime loader can vendor it.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  std::array<std::uint8_t, 32> digest();  // finishes the hash; the object must not be reused
  std::string hex_digest();               // lower-case hex of digest()

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);
std::string sha256_file_hex(const std::string& path);  // streams the file through a memory map

}  // namespace oscar
