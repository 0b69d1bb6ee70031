// SHA-256 (OpenSSL EVP) as lowercase hex: the checksum of every cache blob and row, and of the tuner's source hashes.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace dflash {

std::string Sha256Hex(std::span<const std::uint8_t> bytes);
std::string Sha256Hex(std::string_view text);

// Incremental hashing of several fields without building one big string.
class Sha256Builder {
 public:
  Sha256Builder();
  ~Sha256Builder();
  Sha256Builder(const Sha256Builder&) = delete;
  Sha256Builder& operator=(const Sha256Builder&) = delete;
  // Adds a length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
  Sha256Builder& Field(std::string_view bytes);
  Sha256Builder& Field(std::span<const std::uint8_t> bytes);
  std::string HexDigest();  // finishes; call once

 private:
  void* ctx_;  // EVP_MD_CTX*
};

}  // namespace dflash
