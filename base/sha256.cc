#include "base/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace dflash {
namespace {

std::string ToHex(const unsigned char* d, unsigned n) {
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  return out;
}

std::string OneShot(const void* data, std::size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) != 1) throw std::runtime_error("EVP_Digest failed");
  return ToHex(md, len);
}

}  // namespace

std::string Sha256Hex(std::span<const std::uint8_t> bytes) { return OneShot(bytes.data(), bytes.size()); }
std::string Sha256Hex(std::string_view text) { return OneShot(text.data(), text.size()); }

Sha256Builder::Sha256Builder() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP_DigestInit_ex failed");
  }
}

Sha256Builder::~Sha256Builder() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Sha256Builder& Sha256Builder::Field(std::string_view bytes) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  const std::uint64_t n = bytes.size();
  EVP_DigestUpdate(ctx, &n, sizeof(n));
  EVP_DigestUpdate(ctx, bytes.data(), bytes.size());
  return *this;
}

Sha256Builder& Sha256Builder::Field(std::span<const std::uint8_t> bytes) {
  return Field(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string Sha256Builder::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  return ToHex(md, len);
}

}  // namespace dflash
